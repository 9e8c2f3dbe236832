"""The scripted server answering like vLLM (``air policy-server --vllm``) with the tiny model.

What prime-rl's orchestrator at c87c19b needs from its inference server, checked through the real
openai client over HTTP and verifiers' own parsing (``parse_response_tokens``, ``tokenize_vllm``,
``run_group`` with the sampling arguments prime-rl sends): ids from the tiny model's tokenizer and chat
template, logprobs that the model itself assigns (recomputed here independently, through the loss
transformers computes), truncation, vLLM's errors and admin routes.
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import httpx
import openai
import pytest

from air.policies.scripted import ScriptPolicy
from air.serving.models.tiny_model import MANIFEST, TinyModelError, require_extra, write_tiny_model
from air.serving.server import PolicyServer
from tests.sampling_check import PRIME_RL_EXTRA

REPLY = "Look first.\n```bash\nhead -3 data/train.csv\n```"
MESSAGES = [
    {"role": "system", "content": "You are an ML researcher."},
    {"role": "user", "content": "Beat the baseline on data/train.csv."},
]
# The `tiny` extra's modules (pyproject.toml), as require_extra checks them.
TINY_EXTRA_MODULES = ("torch", "transformers", "tokenizers", "safetensors")


class Says:
    """A policy that always answers ``text`` (a stand-in whose reply the test knows)."""

    name = "says"

    def __init__(self, text: str) -> None:
        self.text = text

    def respond(self, messages, rng) -> str:
        return self.text


@pytest.fixture(scope="module")
def model(tiny_model_dir: Path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    lm = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()
    return tokenizer, lm


@pytest.fixture(scope="module")
def server(tiny_model_dir: Path):
    with PolicyServer(Says(REPLY), vllm_model=tiny_model_dir, max_model_len=256) as running:
        yield running


def _chat(server: PolicyServer, **kwargs):
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        return client.chat.completions.create(model=server.model_name, messages=MESSAGES, **kwargs)


def _teacher_forced_mean_nll(lm, prompt_ids: list[int], completion_ids: list[int], temperature: float = 1.0) -> float:
    """The completion's mean negative log-likelihood as transformers' own loss computes it."""
    import torch

    ids = torch.tensor([prompt_ids + completion_ids])
    labels = ids.clone()
    labels[0, : len(prompt_ids)] = -100
    with torch.inference_mode():
        logits = lm(input_ids=ids).logits / temperature
    return torch.nn.functional.cross_entropy(logits[0, :-1], labels[0, 1:], ignore_index=-100).item()


# ----------------------------------------------------------------------------- the tiny model


def test_the_tiny_model_is_deterministic_and_loads_with_transformers(tiny_model_dir, tmp_path, model):
    again = write_tiny_model(tmp_path / "again")
    digest = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in again.iterdir()}
    assert digest == {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in tiny_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", MANIFEST} <= set(digest)
    tokenizer, lm = model
    assert lm.config.model_type == "llama" and lm.config.vocab_size == len(tokenizer)
    rendered = tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True)
    assert rendered == (
        "<|im_start|>system\nYou are an ML researcher.<|im_end|>\n"
        "<|im_start|>user\nBeat the baseline on data/train.csv.<|im_end|>\n<|im_start|>assistant\n"
    )
    text = "python train.py --epochs 3 && validate  # ünïcödé → ok"
    assert tokenizer.decode(tokenizer.encode(text, add_special_tokens=False)) == text


def test_another_seed_gives_other_weights_and_a_foreign_directory_is_refused(tiny_model_dir, tmp_path):
    from air.serving.models.tiny_model import TinyModelSpec

    other = write_tiny_model(tmp_path / "seed1", TinyModelSpec(seed=1))
    assert (other / "model.safetensors").read_bytes() != (tiny_model_dir / "model.safetensors").read_bytes()
    assert (other / "tokenizer.json").read_bytes() == (tiny_model_dir / "tokenizer.json").read_bytes()
    with pytest.raises(TinyModelError, match="another spec"):
        write_tiny_model(other)  # seed 0 over a seed-1 model
    foreign = tmp_path / "notes"
    foreign.mkdir()
    (foreign / "todo.txt").write_text("keep me")
    with pytest.raises(TinyModelError, match="not a tiny model.*--force"):
        write_tiny_model(foreign)
    assert (foreign / "todo.txt").read_text() == "keep me"
    assert write_tiny_model(other, force=True) == other
    assert (other / "model.safetensors").read_bytes() == (tiny_model_dir / "model.safetensors").read_bytes()


@pytest.mark.parametrize("missing", [["tokenizers"], ["torch", "safetensors"]])
def test_a_missing_extra_names_the_fix(monkeypatch, missing):
    """Whatever part of the extra this environment has: each module is stood in for (an empty module
    imports; None in sys.modules makes `import` fail), so only ``missing`` is missing."""
    import sys
    import types

    for module in TINY_EXTRA_MODULES:
        monkeypatch.setitem(sys.modules, module, None if module in missing else types.ModuleType(module))
    with pytest.raises(TinyModelError) as raised:
        require_extra()
    assert str(raised.value).startswith(f"{', '.join(missing)} not installed: ")
    assert "uv sync --extra tiny" in str(raised.value)
    for module in missing:  # the extra as a whole is all there
        monkeypatch.setitem(sys.modules, module, types.ModuleType(module))
    require_extra()


# ----------------------------------------------------------------------------- chat completions


def test_token_ids_and_logprobs_are_what_verifiers_reads_and_what_the_model_assigns(server, model):
    import asyncio

    from verifiers.utils.response_utils import parse_response_tokens

    tokenizer, lm = model
    response = _chat(server, temperature=1.0, top_p=1.0, logprobs=True, extra_body=PRIME_RL_EXTRA)
    tokens = asyncio.run(parse_response_tokens(response, "chat", max_seq_len=4096))
    assert tokens is not None, "verifiers found no token fields in the response"
    expected_prompt = tokenizer.encode(
        tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )
    assert tokens["prompt_ids"] == expected_prompt and tokens["prompt_mask"] == [0] * len(expected_prompt)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert tokens["completion_ids"] == tokenizer.encode(REPLY, add_special_tokens=False) + [eos]
    assert response.choices[0].message.content == REPLY and response.choices[0].finish_reason == "stop"
    logprobs = tokens["completion_logprobs"]
    assert len(logprobs) == len(tokens["completion_ids"]) and all(lp < 0 for lp in logprobs)
    nll = _teacher_forced_mean_nll(lm, expected_prompt, tokens["completion_ids"])
    assert -sum(logprobs) / len(logprobs) == pytest.approx(nll, rel=1e-5)
    assert response.usage.prompt_tokens == len(expected_prompt)
    assert response.usage.completion_tokens == len(tokens["completion_ids"])


def test_logprobs_follow_the_temperature_as_prime_rls_vllm_reports_them(server, model):
    _, lm = model
    hot = _chat(server, temperature=0.5, logprobs=True, extra_body={"return_token_ids": True})
    ids = hot.choices[0].token_ids
    prompt = hot.prompt_token_ids
    mean = -sum(t.logprob for t in hot.choices[0].logprobs.content) / len(ids)
    assert mean == pytest.approx(_teacher_forced_mean_nll(lm, prompt, ids, temperature=0.5), rel=1e-5)
    assert mean != pytest.approx(_teacher_forced_mean_nll(lm, prompt, ids, temperature=1.0), rel=1e-3)


def test_max_tokens_cuts_the_reply_like_vllm(server, model):
    tokenizer, _ = model
    response = _chat(server, max_completion_tokens=5, logprobs=True, extra_body={"return_token_ids": True})
    choice = response.choices[0]
    assert choice.finish_reason == "length" and len(choice.token_ids) == 5
    assert choice.token_ids == tokenizer.encode(REPLY, add_special_tokens=False)[:5]  # no end-of-turn token
    assert choice.message.content == tokenizer.decode(choice.token_ids) and REPLY.startswith(choice.message.content)
    assert len(choice.logprobs.content) == 5


def test_without_the_flags_the_token_fields_stay_empty_as_in_vllm(server):
    response = _chat(server).model_dump()
    assert response["prompt_token_ids"] is None and response["choices"][0]["token_ids"] is None
    assert response["choices"][0]["logprobs"] is None
    as_ids = _chat(server, logprobs=True, extra_body={"return_tokens_as_token_ids": True, "return_token_ids": True})
    first = as_ids.choices[0]
    assert first.logprobs.content[0].token == f"token_id:{first.token_ids[0]}"


def test_a_bad_sampling_field_is_a_400_before_the_policy_answers(server):
    served = server.app.requests_served
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError, match="temperature"):
            client.chat.completions.create(model=server.model_name, messages=MESSAGES, temperature=-1.0)
    assert server.app.requests_served == served


def test_a_prompt_past_the_context_is_vllms_400_which_verifiers_calls_overlong(server):
    long_messages = [{"role": "user", "content": "word " * 400}]  # > max_model_len=256 tokens
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model=server.model_name, messages=long_messages)
    assert "maximum context length is 256 tokens" in str(caught.value)


def test_unknown_models_are_404_until_a_lora_adapter_of_that_name_is_loaded(server):
    with openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
        with pytest.raises(openai.NotFoundError, match="The model `r16-a32.0` does not exist"):
            client.chat.completions.create(model="r16-a32.0", messages=MESSAGES)
        root = server.base_url.removesuffix("/v1")
        loaded = httpx.post(f"{root}/load_lora_adapter", json={"lora_name": "r16-a32.0", "lora_path": "/ckpt/step_1"})
        assert loaded.status_code == 200 and loaded.json() == {"status": "ok"}
        assert [m.id for m in client.models.list()] == [server.model_name, "r16-a32.0"]
        assert client.chat.completions.create(model="r16-a32.0", messages=MESSAGES).choices[0].message.content
        unloaded = httpx.post(f"{root}/v1/unload_lora_adapter", json={"lora_name": "r16-a32.0"})
        assert unloaded.status_code == 200 and "removed" in unloaded.text
        assert httpx.post(f"{root}/v1/unload_lora_adapter", json={"lora_name": "r16-a32.0"}).status_code == 404
    routes = [update.route for update in server.weight_updates]
    assert routes[-3:] == ["/load_lora_adapter", "/v1/unload_lora_adapter", "/v1/unload_lora_adapter"]


def test_weight_routes_are_acknowledged_and_recorded(server):
    root = server.base_url.removesuffix("/v1")
    before = len(server.weight_updates)
    assert httpx.post(f"{root}/reload_weights", json={}).json() == {"status": "ok"}
    assert httpx.post(f"{root}/update_weights", json={"weight_dir": "out/broadcasts/step_1"}).json() == {"status": "ok"}
    assert httpx.post(f"{root}/update_weights", content=b"[1, 2]").status_code == 400
    assert httpx.post(f"{root}/load_lora_adapter", json={"lora_name": 3}).status_code == 400
    recorded = server.weight_updates[before:]
    assert [(u.route, u.body) for u in recorded[:2]] == [
        ("/reload_weights", {}),
        ("/update_weights", {"weight_dir": "out/broadcasts/step_1"}),
    ]


# ----------------------------------------------------------------------------- tokenize, token prompts


def test_tokenize_serves_verifiers_interleaved_prompts(server, model):
    import asyncio

    from verifiers.utils.token_utils import tokenize_vllm

    tokenizer, _ = model

    async def both():
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
            text = await tokenize_vllm(client, "World!", None, server.model_name)
            chat = await tokenize_vllm(
                client, MESSAGES, None, server.model_name, extra_kwargs={"add_generation_prompt": False}
            )
            return text, chat

    text, chat = asyncio.run(both())
    assert text == tokenizer.encode("World!", add_special_tokens=False)
    assert chat == tokenizer.encode(tokenizer.apply_chat_template(MESSAGES, tokenize=False), add_special_tokens=False)
    root = server.base_url.removesuffix("/v1")
    assert httpx.post(f"{root}/tokenize", json={"prompt": "a", "messages": MESSAGES}).status_code == 400


def test_a_prompt_given_as_token_ids_is_used_as_is(server, model):
    tokenizer, lm = model
    prompt = tokenizer.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n", add_special_tokens=False)
    body = {"model": server.model_name, "messages": MESSAGES, "tokens": prompt, "logprobs": True, **PRIME_RL_EXTRA}
    answer = httpx.post(f"{server.base_url}/chat/completions/tokens", json=body).json()
    assert answer["prompt_token_ids"] == prompt
    ids = answer["choices"][0]["token_ids"]
    mean = -sum(t["logprob"] for t in answer["choices"][0]["logprobs"]["content"]) / len(ids)
    assert mean == pytest.approx(_teacher_forced_mean_nll(lm, prompt, ids), rel=1e-5)


# ----------------------------------------------------------------------------- a rollout as prime-rl runs it


async def test_a_rollout_through_verifiers_carries_tokens_on_every_step(tiny_model_dir):
    """simple_env's rollouts with exactly the sampling arguments prime-rl's env workers pass: every step
    gets prompt ids, completion ids and logprobs, and each step's prompt extends the conversation."""
    import simple_env

    env = simple_env.load_environment()
    row = env.get_dataset().to_list()[0]
    sampling = {"temperature": 1.0, "top_p": 1.0, "logprobs": True, "max_tokens": 64, "extra_body": PRIME_RL_EXTRA}
    policy = ScriptPolicy(["validate", "set 50", "validate"])
    with PolicyServer(policy, vllm_model=tiny_model_dir) as server:
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
            outputs = await env.run_group([row] * 2, client, server.model_name, sampling, state_columns=["trajectory"])
    for output in outputs:
        assert output.get("error") is None, output.get("error")
        steps = output["trajectory"]
        assert len(steps) >= 3
        for step in steps:
            tokens = step["tokens"]
            assert tokens is not None and tokens["completion_ids"] and tokens["prompt_ids"]
            assert len(tokens["completion_logprobs"]) == len(tokens["completion_ids"])
            assert all(math.isfinite(lp) and lp <= 0 for lp in tokens["completion_logprobs"])
        for earlier, later in zip(steps, steps[1:], strict=False):
            before = earlier["tokens"]["prompt_ids"] + earlier["tokens"]["completion_ids"]
            assert later["tokens"]["prompt_ids"][: len(before)] == before, "a later prompt rewrote an earlier one"


def test_policy_server_vllm_on_a_directory_without_a_model_names_it(tiny_model_dir, tmp_path, capsys):
    from air.cli.main import main

    assert main(["policy-server", "--vllm", str(tmp_path), "--port", "0"]) != 0
    assert f"{tmp_path} is not a model directory" in capsys.readouterr().err
    assert main(["tiny-model", str(tmp_path / "m"), "--seed", "2"]) == 0
    manifest = json.loads((tmp_path / "m" / MANIFEST).read_text())
    assert manifest["spec"]["seed"] == 2


async def test_air_standalone_can_serve_its_scripted_agent_like_vllm(tiny_model_dir, tmp_path):
    from air.runs.standalone import StandaloneSettings, run_standalone

    settings = StandaloneSettings(
        env="simple_env", steps=1, batch_size=2, rollouts_per_example=2, output_dir=str(tmp_path),
        vllm_model=str(tiny_model_dir),
    )  # fmt: skip
    summary = await run_standalone(settings)
    assert summary["rollouts"] == 2 and summary["masked"] == 0
    assert summary["model"] == str(tiny_model_dir)  # vLLM names a model by the path it serves
    with pytest.raises(ValueError, match="cannot be combined with base_url"):
        StandaloneSettings(vllm_model=str(tiny_model_dir), base_url="http://127.0.0.1:1/v1")


def test_todays_prime_rl_token_route_through_renderers_own_client(server, model, tiny_model_dir):
    """Today's prime-rl renders the chat client-side (renderers) and POSTs token ids to vLLM's
    /inference/v1/generate; renderers' own client parses the answer, strictly (MalformedGenerateResponseError
    on any field it does not expect). The policy reads the conversation back from the ChatML tokens."""
    import asyncio

    from renderers import DefaultRendererConfig, create_renderer
    from renderers.client import generate

    tokenizer, lm = model
    renderer = create_renderer(tokenizer, DefaultRendererConfig())
    seen: list = []
    policy = server.app.policy
    original = policy.respond
    policy.respond = lambda messages, rng: seen.append(messages) or original(messages, rng)

    async def call():
        async with openai.AsyncOpenAI(base_url=server.base_url, api_key="x", max_retries=0) as client:
            return await generate(
                client=client, renderer=renderer, messages=MESSAGES, model=server.model_name,
                sampling_params={"temperature": 0.7, "max_tokens": 64},
            )  # fmt: skip

    try:
        result = asyncio.run(call())
    finally:
        policy.respond = original
    assert seen == [MESSAGES], "the policy sees the conversation the client rendered"
    expected_prompt = tokenizer.encode(
        tokenizer.apply_chat_template(MESSAGES, tokenize=False, add_generation_prompt=True), add_special_tokens=False
    )
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert result["prompt_ids"] == expected_prompt
    assert result["completion_ids"] == tokenizer.encode(REPLY, add_special_tokens=False) + [eos]
    assert result["content"] == REPLY and result["finish_reason"] == "stop"
    nll = _teacher_forced_mean_nll(lm, expected_prompt, result["completion_ids"], temperature=0.7)
    logprobs = result["completion_logprobs"]
    assert -sum(logprobs) / len(logprobs) == pytest.approx(nll, rel=1e-5)


def test_todays_prime_rl_admin_routes_and_a_bad_token_request(server):
    root = server.base_url.removesuffix("/v1")
    for route in ("/pause", "/resume"):
        assert httpx.post(root + route, json={}).status_code == 200
    assert [u.route for u in server.weight_updates][-2:] == ["/pause", "/resume"]
    metrics = httpx.get(root + "/metrics")
    assert metrics.status_code == 200 and "vllm:num_requests_running" in metrics.text
    empty = httpx.post(root + "/inference/v1/generate", json={"model": server.model_name, "token_ids": []})
    assert empty.status_code == 400 and "token_ids" in empty.text
    unknown = httpx.post(root + "/inference/v1/generate", json={"model": "nope", "token_ids": [1, 2]})
    assert unknown.status_code == 404 and "The model `nope` does not exist." in unknown.text
