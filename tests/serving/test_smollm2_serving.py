"""SmolLM2-135M-Instruct served on the CPU (``--policy smollm2``): its own samples, read as vLLM's.

The model comes from PyPI's wheel (conftest's ``smollm2``, prepared once per session). What the server
reports for a sample (prompt ids, token ids, each token's logprob at the request's temperature, where and
why it stopped) is checked against a separately loaded copy of the folder and an independent forward pass;
greedy replies against transformers' own ``generate``. Then the main job and classic vf-eval run on it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import openai
import pytest

from air.serving.server import PolicyServer
from tests.sampling_check import PRIME_RL_EXTRA, expected_logprobs

MESSAGES = [
    {"role": "system", "content": "You run shell commands. Reply with one command in a ```bash block."},
    {"role": "user", "content": "List the files in the current folder."},
]


@pytest.fixture(scope="module")
def reference(smollm2):
    """The folder loaded again, apart from the server: tokenizer and model for the independent checks."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(smollm2.path, dtype=torch.float32).eval()
    return AutoTokenizer.from_pretrained(smollm2.path), model


@pytest.fixture(scope="module")
def server(smollm2):
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("AIR_CACHE_DIR", str(smollm2.path.parent))  # where `--policy smollm2` finds it prepared
        with PolicyServer("smollm2") as running:
            assert Path(running.model_name) == smollm2.path
            yield running


def test_a_sample_carries_the_ids_and_logprobs_of_an_independent_forward_pass(server, reference):
    tokenizer, model = reference
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    reply = client.chat.completions.create(
        model=server.model_name,
        messages=MESSAGES,
        temperature=0.7,
        max_tokens=32,
        logprobs=True,
        seed=3,
        extra_body=PRIME_RL_EXTRA,
    )
    data = reply.model_dump()
    choice = data["choices"][0]
    prompt_ids = tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)
    assert data["prompt_token_ids"] == prompt_ids
    token_ids = choice["token_ids"]
    assert 1 <= len(token_ids) <= 32 and data["usage"]["completion_tokens"] == len(token_ids)
    served = [entry["logprob"] for entry in choice["logprobs"]["content"]]
    assert served == pytest.approx(expected_logprobs(model, prompt_ids, token_ids, 0.7), abs=2e-3)
    assert choice["message"]["content"] == tokenizer.decode(token_ids, skip_special_tokens=True)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert choice["finish_reason"] == ("stop" if token_ids[-1] == im_end else "length")


def test_greedy_replies_are_what_transformers_generates(server, reference):
    import torch

    tokenizer, model = reference
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    reply = client.chat.completions.create(
        model=server.model_name, messages=MESSAGES, temperature=0, max_tokens=24, extra_body=PRIME_RL_EXTRA
    )
    prompt = torch.tensor([tokenizer.apply_chat_template(MESSAGES, add_generation_prompt=True)])
    with torch.inference_mode():
        generated = model.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=24, do_sample=False)
    expected = generated[0, prompt.shape[1] :].tolist()
    assert reply.model_dump()["choices"][0]["token_ids"] == expected


def test_concurrent_requests_are_batched_and_keep_their_seeded_replies(server):
    import asyncio

    async def ask_all() -> list[str]:
        client = openai.AsyncOpenAI(base_url=server.base_url, api_key="x")
        asks = [
            client.chat.completions.create(
                model=server.model_name, messages=MESSAGES, temperature=1.0, max_tokens=16, seed=seed
            )
            for seed in range(4)
        ]
        replies = await asyncio.gather(*asks)
        await client.close()
        return [r.choices[0].message.content for r in replies]

    together = asyncio.run(ask_all())
    engine = server.app.vllm.sampler.engine
    assert engine.stats.largest_batch > 1, "four requests at once were never batched"
    client = openai.OpenAI(base_url=server.base_url, api_key="x")
    alone = [
        client.chat.completions.create(
            model=server.model_name, messages=MESSAGES, temperature=1.0, max_tokens=16, seed=seed
        )
        .choices[0]
        .message.content
        for seed in range(2)
    ]
    assert alone == together[:2]


def test_the_main_job_plays_dial_with_smollm2(smollm2, tmp_path):
    env = {**os.environ, "AIR_CACHE_DIR": str(smollm2.path.parent)}
    out = tmp_path / "run"
    argv = ["standalone", "--env", "simple_env", "--policy", "smollm2", "--steps", "1", "--batch-size", "2"]
    argv += ["--rollouts-per-example", "2", "--max-turns", "2", "--max-tokens", "24", "--output-dir", str(out)]
    done = subprocess.run(
        [sys.executable, "-m", "air.cli.main", *argv], env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stdout + done.stderr
    [step] = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert step["rollouts"] == 2 and step["masked"] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["model"] == str(smollm2.path)


def test_classic_vf_eval_runs_simple_env_against_the_served_model(server, tmp_path):
    vf_eval = Path(sys.executable).with_name("vf-eval")
    argv = [str(vf_eval), "simple_env", "-b", server.base_url, "-m", server.model_name, "-k", "OPENAI_API_KEY"]
    argv += ["-n", "2", "-r", "1", "-t", "24", "-a", json.dumps({"max_turns": 2}), "-s"]
    env = {**os.environ, "OPENAI_API_KEY": "x"}
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (results,) = list(tmp_path.glob("outputs/evals/simple_env--*/*/results.jsonl"))
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 2 and all("reward" in row for row in rows)
    assert server.app.requests_served >= 2
