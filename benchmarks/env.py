"""Benchmark of the air_mlgym env (real containers; the model is the scripted policy server).

    uv run python benchmarks/env.py [--json] [--turns 300] [--rollouts 32] [--policy improve]

- turn_overhead_ms_median / _p95: time env_response spends per turn beyond the command itself
  (reply parsing, marker scan, observation, bookkeeping), from 300 turns of ``true`` in one
  rollout: env_response's wall time minus the command's own duration as the shell measured it.
  The model is not involved (env_response is called directly). Target: <= 5 ms median.
- rollouts_per_min_32: 32 rollouts at once on the built-in game task laneMerge through
  verifiers' rollout path (HTTP to the scripted server, fresh containers, workspace set-up,
  a validate and a submit evaluation each, container teardown), as rollouts per minute.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from openai import AsyncOpenAI

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import air_mlgym  # noqa: E402
from air.agents.policies import make_policy  # noqa: E402
from air.agents.server import PolicyServer  # noqa: E402
from air.env.mlgym_env import STATE_KEY  # noqa: E402


async def turn_overhead(turns: int, out: Path) -> list[float]:
    env = air_mlgym.load_environment(
        task_configs=["laneMerge"], max_turns=turns + 1, save_trajectories=False, pool_size=0, run_id="bench-env"
    )
    row = env.get_dataset().to_list()[0]
    state = await env.init_state(row, client=None, model="bench")  # type: ignore[arg-type]
    state = await env.setup_state(state)
    rollout = state[STATE_KEY]
    reply = [{"role": "assistant", "content": "Checking that the shell answers.\n```bash\ntrue\n```"}]
    overheads = []
    try:
        for _ in range(turns):
            start = time.perf_counter()
            await env.env_response(reply, state)
            total = time.perf_counter() - start
            overheads.append((total - rollout.turns[-1].duration_s) * 1000)
    finally:
        await env.finish_rollout(state)  # not completed: releases the container without evaluating
    return overheads


async def concurrent_rollouts(n: int, policy: str, out: Path) -> float:
    env = air_mlgym.load_environment(
        task_configs=["laneMerge"], max_turns=8, trajectory_dir=str(out), pool_size=4, run_id="bench-env"
    )
    row = env.get_dataset().to_list()[0]
    with PolicyServer(make_policy(policy)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
        start = time.perf_counter()
        outputs = await env.run_group([row] * n, client, server.model_name, {})
        seconds = time.perf_counter() - start
        await client.close()
    failed = [o for o in outputs if o.get("error")]
    if failed:
        raise SystemExit(f"{len(failed)} of {n} rollouts failed: {failed[0].get('error')}")
    return seconds


async def main_async(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="air-bench-") as tmp:
        overheads = await turn_overhead(args.turns, Path(tmp))
        seconds = await concurrent_rollouts(args.rollouts, args.policy, Path(tmp) / "trajectories")
    overheads.sort()
    return {
        "turn_overhead_ms_median": statistics.median(overheads),
        "turn_overhead_ms_p95": overheads[int(0.95 * (len(overheads) - 1))],
        "turns_measured": len(overheads),
        f"rollouts_per_min_{args.rollouts}": args.rollouts / seconds * 60,
        "rollouts_wall_s": seconds,
        "policy": args.policy,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--turns", type=int, default=300)
    parser.add_argument("--rollouts", type=int, default=32)
    parser.add_argument("--policy", default="improve")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value:.2f}" if isinstance(value, float) else f"{key:>28}: {value}")


if __name__ == "__main__":
    main()
