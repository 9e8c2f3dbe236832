"""The served model sampling its own replies (``--policy model:DIR``), with the tiny random model.

Everything a sample reports is checked against an independent forward pass of a freshly loaded copy of
the model: the token ids, each token's logprob under the request's temperature, top-k and top-p, where it
stopped and why. Continuous batching must not change a seeded sample: the same requests alone and
together give the same tokens. The real model (SmolLM2) is served in test_smollm2_serving.py.
"""

from __future__ import annotations

from concurrent.futures import wait
from pathlib import Path

import httpx
import openai
import pytest

from air.serving.runtime.generation_engine import GenerationEngine
from air.serving.runtime.sampling import SamplingParams
from air.serving.runtime.token_scorer import PromptTooLong, TokenScorer
from air.serving.server import PolicyServer
from rigs.patience import backstop
from tests.sampling_check import PRIME_RL_EXTRA, expected_logprobs

MESSAGES = [{"role": "user", "content": "Write one command that lists the data files."}]


@pytest.fixture(scope="module")
def scorer(tiny_model_dir: Path) -> TokenScorer:
    return TokenScorer(tiny_model_dir)


@pytest.fixture(scope="module")
def reference(tiny_model_dir: Path):
    """The model loaded again, apart from the server's copy: the independent forward pass."""
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


@pytest.fixture
def engine(scorer: TokenScorer):
    engine = GenerationEngine(scorer, seed=0)
    yield engine
    engine.close()


@pytest.mark.parametrize(
    ("temperature", "top_k", "top_p"), [(1.0, 0, 1.0), (0.7, 0, 1.0), (1.3, 0, 0.8), (1.0, 20, 1.0)]
)
def test_samples_carry_the_logprobs_they_were_drawn_with(engine, scorer, reference, temperature, top_k, top_p):
    prompt = scorer.prompt_ids(MESSAGES)
    params = SamplingParams(temperature=temperature, top_k=top_k, top_p=top_p, max_tokens=24, seed=5)
    [sample] = engine.submit(prompt, params).result(timeout=backstop(120))
    assert sample.prompt_ids == prompt and 1 <= len(sample.token_ids) <= 24
    wanted = expected_logprobs(reference, prompt, sample.token_ids, temperature, top_k, top_p)
    assert sample.logprobs == pytest.approx(wanted, abs=2e-3)
    ended_itself = sample.token_ids[-1] == scorer.eos_id
    assert sample.finish_reason == ("stop" if ended_itself else "length")
    assert len(sample.token_ids) == 24 or ended_itself
    assert sample.text == scorer.tokenizer.decode(sample.token_ids, skip_special_tokens=True)


def test_greedy_is_the_argmax_at_every_step_with_unscaled_logprobs(engine, scorer, reference):
    import torch

    prompt = scorer.prompt_ids(MESSAGES)
    [sample] = engine.submit(prompt, SamplingParams(temperature=0, max_tokens=16)).result(timeout=backstop(120))
    with torch.inference_mode():
        logits = reference(input_ids=torch.tensor([prompt + sample.token_ids])).logits[0].float()
    for place, token in enumerate(sample.token_ids):
        row = torch.log_softmax(logits[len(prompt) + place - 1], -1)
        assert token == int(row.argmax())
        assert sample.logprobs[place] == pytest.approx(float(row[token]), abs=2e-3)


def test_batching_does_not_change_a_seeded_sample(scorer):
    asks = [f"Task {i}: " + "count the rows. " * i for i in range(6)]
    prompts = [scorer.prompt_ids([{"role": "user", "content": ask}]) for ask in asks]
    params = [SamplingParams(temperature=1.0, max_tokens=12 + 3 * i, seed=100 + i) for i in range(6)]
    alone_engine = GenerationEngine(scorer)
    try:
        alone = [
            alone_engine.submit(p, s).result(timeout=backstop(120))[0] for p, s in zip(prompts, params, strict=True)
        ]
        assert alone_engine.stats.largest_batch == 1
    finally:
        alone_engine.close()
    together_engine = GenerationEngine(scorer)
    try:
        futures = [together_engine.submit(p, s) for p, s in zip(prompts, params, strict=True)]
        wait(futures, timeout=120)
        together = [future.result()[0] for future in futures]
        assert together_engine.stats.largest_batch > 1, "the requests were never batched"
    finally:
        together_engine.close()
    for one, other in zip(alone, together, strict=True):
        assert one.token_ids == other.token_ids
        assert one.logprobs == pytest.approx(other.logprobs, abs=2e-3)


def test_stop_strings_token_ids_and_length_end_a_sample_as_vllm_does(engine, scorer):
    prompt = scorer.prompt_ids(MESSAGES)
    [free] = engine.submit(prompt, SamplingParams(temperature=0, max_tokens=30, ignore_eos=True)).result(
        timeout=backstop(120)
    )
    assert free.finish_reason == "length" and len(free.token_ids) == 30
    # A stop string: the first piece of text the greedy sample writes after its first few tokens.
    stop = free.text[len(scorer.tokenizer.decode(free.token_ids[:3], skip_special_tokens=True)) :][:2]
    assert stop, "the greedy sample wrote no text to stop on"
    params = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, stop=(stop,))
    [cut] = engine.submit(prompt, params).result(timeout=backstop(120))
    assert (cut.finish_reason, cut.stop_reason) == ("stop", stop)
    assert cut.text == free.text[: free.text.find(stop)] and stop not in cut.text
    assert cut.token_ids == free.token_ids[: len(cut.token_ids)]
    third = free.token_ids[2]
    by_id = SamplingParams(temperature=0, max_tokens=30, ignore_eos=True, stop_token_ids=(third,))
    [stopped] = engine.submit(prompt, by_id).result(timeout=backstop(120))
    assert stopped.token_ids == free.token_ids[: free.token_ids.index(third) + 1]
    assert (stopped.finish_reason, stopped.stop_reason) == ("stop", third)


def test_n_choices_differ_and_a_prompt_past_the_context_is_refused(engine, scorer):
    prompt = scorer.prompt_ids(MESSAGES)
    samples = engine.submit(prompt, SamplingParams(temperature=1.0, max_tokens=10, seed=1), n=4).result(
        timeout=backstop(120)
    )
    assert len(samples) == 4 and len({tuple(s.token_ids) for s in samples}) > 1
    with pytest.raises(PromptTooLong, match="maximum context length"):
        engine.submit([5] * scorer.max_model_len, SamplingParams())


def test_the_server_samples_with_the_requests_knobs(tiny_model_dir: Path, scorer, reference):
    with PolicyServer(f"model:{tiny_model_dir}") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")
        reply = client.chat.completions.create(
            model=server.model_name,
            messages=MESSAGES,
            temperature=0.9,
            max_tokens=20,
            logprobs=True,
            top_logprobs=3,
            seed=11,
            extra_body=PRIME_RL_EXTRA,
        )
        data = reply.model_dump()
        choice = data["choices"][0]
        token_ids = choice["token_ids"]
        assert data["prompt_token_ids"] == scorer.tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
        logprobs = [entry["logprob"] for entry in choice["logprobs"]["content"]]
        wanted = expected_logprobs(reference, data["prompt_token_ids"], token_ids, 0.9)
        assert logprobs == pytest.approx(wanted, abs=2e-3)
        assert all(len(entry["top_logprobs"]) == 3 for entry in choice["logprobs"]["content"])
        assert data["usage"]["completion_tokens"] == len(token_ids)
        again = client.chat.completions.create(
            model=server.model_name,
            messages=MESSAGES,
            temperature=0.9,
            max_tokens=20,
            seed=11,
            extra_body=PRIME_RL_EXTRA,
        )
        assert again.choices[0].message.content == reply.choices[0].message.content  # seeded: the same draw
        refused = httpx.post(
            f"{server.base_url}/chat/completions",
            json={"model": server.model_name, "messages": MESSAGES, "frequency_penalty": 0.5},
        )
        assert refused.status_code == 400 and refused.json()["error"]["param"] == "frequency_penalty"
        root = server.base_url.removesuffix("/v1")
        generated = httpx.post(
            f"{root}/inference/v1/generate",
            json={
                "model": server.model_name,
                "token_ids": data["prompt_token_ids"],
                "sampling_params": {"temperature": 0},
            },
            timeout=60,
        ).json()
        tokens = generated["choices"][0]["token_ids"]
        assert [e["token"] for e in generated["choices"][0]["logprobs"]["content"]] == [f"token_id:{t}" for t in tokens]
        greedy = expected_logprobs(reference, data["prompt_token_ids"], tokens[:1])
        assert generated["choices"][0]["logprobs"]["content"][0]["logprob"] == pytest.approx(greedy[0], abs=2e-3)
