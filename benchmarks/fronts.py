"""What a turn and a rollout cost on each front of air_mlgym, measured side by side in one run.

    uv run python benchmarks/fronts.py [--json] [--turns 100] [--null-turns 20] [--rollouts 32] [--rounds 2]

Each measurement runs in its own process, in the environment of its verifiers generation (``.venv``:
verifiers 0.1.10, the classic front; ``.venv-v1``: verifiers 0.4.0, the v1 front), alternated round by
round so that both see the same machine:

- turn_overhead_ms_<front>: what a turn costs beyond the model and the command. One rollout of laneMerge
  whose scripted model always answers ``true``; the policy server stamps each model call, and a turn's
  overhead is the time between two consecutive calls minus the command's own duration (as the shell
  measured it): the front's loop, HTTP, the env's parsing and bookkeeping, and on the v1 front the
  harness and verifiers' interception server. Median over the turns (the first two left out). Fronts:
  ``classic`` (verifiers 0.1.10's ``MultiTurnEnv`` loop, an AsyncOpenAI client), ``v1`` (verifiers
  0.4.0's ``Env.run_episode`` with our in-process player), ``v1_null`` (the same with verifiers' ``null``
  harness: a chat program per turn).
- rollouts_per_min_<front>: ``--rollouts`` rollouts at once on laneMerge (fresh containers, the improve
  policy: workspace set-up, a validate and a submit evaluation each, teardown), per minute of wall time,
  after one rollout that pays for lazy imports and the pool's first containers.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PYTHONS = {"classic": ROOT / ".venv" / "bin" / "python", "v1": ROOT / ".venv-v1" / "bin" / "python"}
REPLY = "Checking that the shell answers.\n```bash\ntrue\n```"


class StampedPolicy:
    """Always ``true``, with the time of each call (the server calls it once per model request)."""

    def __init__(self) -> None:
        self.stamps: list[float] = []

    def respond(self, messages, rng) -> str:
        self.stamps.append(time.perf_counter())
        return REPLY


def overheads(stamps: list[float], durations: list[float]) -> list[float]:
    """Per turn: from one model call to the next, less the command the env ran in between (ms)."""
    gaps = [b - a for a, b in zip(stamps, stamps[1:], strict=False)]
    return [(gap - duration) * 1000 for gap, duration in zip(gaps, durations, strict=False)][2:]


def taskset_args(out: Path, max_turns: int, pool: int) -> dict:
    return {"task_configs": ["laneMerge"], "max_turns": max_turns, "trajectory_dir": str(out), "pool_size": pool,
            "run_id": "bench-fronts", "num_examples_per_task": 1}  # fmt: skip


def turn_durations(out: Path) -> list[float]:
    (path,) = sorted(out.rglob("*.json"))
    return [turn["duration_s"] or 0.0 for turn in json.loads(path.read_text())["turns"]]


# --- the classic front (verifiers 0.1.10) ------------------------------------------------------


async def classic(kind: str, count: int, out: Path) -> dict:
    from openai import AsyncOpenAI

    import air_mlgym
    from air.policies.scripted import make_policy
    from air.serving.server import PolicyServer

    turns = kind == "turns"
    env = air_mlgym.load_environment(**taskset_args(out, count if turns else 8, 0 if turns else 4))
    row = env.get_dataset().to_list()[0]
    policy = StampedPolicy() if turns else make_policy("improve")
    with PolicyServer(policy) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="bench", max_retries=0)
        if not turns:  # a first rollout pays for lazy imports and the pool's first containers
            await env.run_group([row], client, server.model_name, {})
        start = time.perf_counter()
        outputs = await env.run_group([row] * (1 if turns else count), client, server.model_name, {})
        seconds = time.perf_counter() - start
        await client.close()
    failed = [o.get("error") for o in outputs if o.get("error")]
    if failed:
        raise SystemExit(f"classic: {len(failed)} rollouts failed: {failed[0]}")
    if turns:
        return {"overheads_ms": overheads(policy.stamps, turn_durations(out))}
    return {"seconds": seconds}


# --- the v1 front (verifiers 0.4.0) ---------------------------------------------------------------


async def v1(kind: str, count: int, out: Path, harness: str) -> dict:
    from verifiers.v1.clients import ModelContext
    from verifiers.v1.configs.client import EvalClientConfig
    from verifiers.v1.utils import loaders

    from air.policies.scripted import make_policy
    from air.serving.server import PolicyServer

    turns = kind == "turns"
    data = {"taskset": {"id": "air_mlgym", **taskset_args(out, count if turns else 8, 0 if turns else 4)}}
    data["player"] = {"harness": {"id": harness}}
    env = loaders.load_environment(loaders.resolve_env_config(data))
    task = next(iter(env.taskset))
    policy = StampedPolicy() if turns else make_policy("improve")
    os.environ["AIR_BENCH_KEY"] = "bench"
    with PolicyServer(policy) as server:
        client = EvalClientConfig(base_url=server.base_url, api_key_var="AIR_BENCH_KEY")
        ctx = ModelContext(model="bench", client=client)
        async with env.serving():
            if not turns:  # a first rollout pays for lazy imports and the pool's first containers
                await env.run_episode(task, ctx)
            start = time.perf_counter()
            episodes = await asyncio.gather(*(env.run_episode(task, ctx) for _ in range(1 if turns else count)))
            seconds = time.perf_counter() - start
    failed = [e.errors or [err for t in e.traces for err in t.errors] for e in episodes if not e.ok]
    if failed:
        raise SystemExit(f"v1 ({harness}): {len(failed)} episodes failed: {failed[0]}")
    if turns:
        return {"overheads_ms": overheads(policy.stamps, turn_durations(out))}
    return {"seconds": seconds}


def measure(front: str, kind: str, count: int) -> dict:
    with tempfile.TemporaryDirectory(prefix="air-bench-fronts-") as tmp:
        out = Path(tmp) / "trajectories"
        if front == "classic":
            return asyncio.run(classic(kind, count, out))
        harness = "null" if front == "v1_null" else "air_mlgym"
        return asyncio.run(v1(kind, count, out, harness))


# --- the driver: every measurement in its own process, alternated ---------------------------------


def run_measurement(front: str, kind: str, count: int) -> dict:
    python = PYTHONS["classic" if front == "classic" else "v1"]
    if not python.exists():
        v1_sync = "UV_PROJECT_ENVIRONMENT=.venv-v1 uv sync --no-group classic --group v1"
        fix = "uv sync" if front == "classic" else v1_sync
        raise SystemExit(f"{python} is missing: run {fix}")
    command = [str(python), __file__, "--measure", front, kind, str(count)]
    done = subprocess.run(command, capture_output=True, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"{front} {kind} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main_driver(args: argparse.Namespace) -> dict:
    turns: dict[str, list[float]] = {"classic": [], "v1": [], "v1_null": []}
    seconds: dict[str, list[float]] = {"classic": [], "v1": []}
    for _ in range(args.rounds):
        for front in turns:
            count = args.null_turns if front == "v1_null" else args.turns
            turns[front] += run_measurement(front, "turns", count)["overheads_ms"]
        for front in seconds:
            seconds[front].append(run_measurement(front, "rollouts", args.rollouts)["seconds"])
    result: dict = {}
    for front, values in turns.items():
        values.sort()
        result[f"turn_overhead_ms_{front}"] = statistics.median(values)
        result[f"turn_overhead_ms_p95_{front}"] = values[int(0.95 * (len(values) - 1))]
        result[f"turns_measured_{front}"] = len(values)
    result["turn_overhead_ms_v1_minus_classic"] = result["turn_overhead_ms_v1"] - result["turn_overhead_ms_classic"]
    for front, values in seconds.items():
        result[f"rollouts_per_min_{args.rollouts}_{front}"] = args.rollouts / statistics.median(values) * 60
    result["rollouts_per_min_v1_over_classic"] = (
        result[f"rollouts_per_min_{args.rollouts}_v1"] / result[f"rollouts_per_min_{args.rollouts}_classic"]
    )
    result["rounds"] = args.rounds
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--turns", type=int, default=100, help="turns of the overhead rollout (classic, v1)")
    parser.add_argument("--null-turns", type=int, default=20, help="turns of the null harness's rollout (slow)")
    parser.add_argument("--rollouts", type=int, default=32, help="rollouts at once for rollouts per minute")
    parser.add_argument("--rounds", type=int, default=2, help="times each measurement runs, alternated")
    parser.add_argument("--measure", nargs=3, metavar=("FRONT", "KIND", "COUNT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.measure:
        front, kind, count = args.measure
        print(json.dumps(measure(front, kind, int(count))))
        return
    result = main_driver(args)
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>40}: {value:.2f}" if isinstance(value, float) else f"{key:>40}: {value}")


if __name__ == "__main__":
    main()
