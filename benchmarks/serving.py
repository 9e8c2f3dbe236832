"""Tokens per second of SmolLM2-135M-Instruct served on this CPU (``air policy-server --policy smollm2``).

    uv run --group dev --extra tiny python benchmarks/serving.py [--json] [--tokens 64] [--concurrency 1 2 4 8 16]

Over real HTTP (the openai client), with the dial game's system and task prompt (our text, about 400
tokens): for each concurrency c, c requests sent at once, each asking for exactly --tokens tokens
(``ignore_eos``) with its own seed. Per concurrency: the wall time of the whole round, aggregate generated
tokens per second, each request's own tokens per second (its tokens over its own latency: what one rollout
sees), and the largest batch the engine ran. Also the prompt's prefill alone (max_tokens 1).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from openai import AsyncOpenAI  # noqa: E402

from air.serving.server import PolicyServer  # noqa: E402

TASK = (
    "# Task: dial\nA dial goes from 0 to 100 and starts at 50. A hidden target, an integer from 0 to 100, "
    "scores the dial: 1 - |dial - target| / 100. Find it in as few turns as you can.\n"
)


def system_prompt() -> str:
    from air.env.actions import REPLY_FORMAT

    commands = "Commands (one per reply):\n  set N\n  validate\n  submit"
    return f"You are an agent that plays a game by sending commands.\n\n{commands}\n\n{REPLY_FORMAT}"


async def round_of(client: AsyncOpenAI, model: str, concurrency: int, tokens: int, messages) -> dict:
    async def one(seed: int) -> tuple[int, float]:
        started = time.perf_counter()
        reply = await client.chat.completions.create(
            model=model,
            messages=messages,
            max_tokens=tokens,
            temperature=1.0,
            seed=seed,
            extra_body={"ignore_eos": True},
        )
        return reply.usage.completion_tokens, time.perf_counter() - started

    started = time.perf_counter()
    results = await asyncio.gather(*(one(seed) for seed in range(concurrency)))
    wall = time.perf_counter() - started
    generated = sum(count for count, _ in results)
    return {
        "concurrency": concurrency,
        "wall_s": round(wall, 2),
        "aggregate_tokens_per_s": round(generated / wall, 1),
        "per_request_tokens_per_s_median": round(statistics.median(c / s for c, s in results), 1),
    }


async def measure(args: argparse.Namespace) -> dict:
    server = PolicyServer("smollm2").start()
    engine = server.app.vllm.sampler.engine
    messages = [{"role": "system", "content": system_prompt()}, {"role": "user", "content": TASK}]
    prompt_tokens = len(server.app.vllm.scorer.prompt_ids(messages))
    client = AsyncOpenAI(base_url=server.base_url, api_key="x", timeout=1800)
    try:
        await round_of(client, server.model_name, 1, 4, messages)  # warm-up: first forward passes
        started = time.perf_counter()
        await client.chat.completions.create(model=server.model_name, messages=messages, max_tokens=1)
        prefill = time.perf_counter() - started
        rounds = []
        for concurrency in args.concurrency:
            engine.stats.largest_batch = 0
            result = await round_of(client, server.model_name, concurrency, args.tokens, messages)
            result["largest_batch"] = engine.stats.largest_batch
            rounds.append(result)
            if not args.json:
                print(json.dumps(result), flush=True)
    finally:
        await client.close()
        server.stop()
    return {
        "prompt_tokens": prompt_tokens,
        "tokens_per_request": args.tokens,
        "prefill_s": round(prefill, 3),
        "torch_threads": __import__("torch").get_num_threads(),
        "cpus": os.cpu_count(),
        "load_1min_at_end": round(os.getloadavg()[0], 2),
        "rounds": rounds,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = asyncio.run(measure(args))
    print(json.dumps(result) if args.json else json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
