"""Benchmark of the air_mlgym env (real containers; the model is the scripted policy server).

    uv run python benchmarks/env.py [--json] [--turns 300] [--rollouts 32] [--policy improve]
        [--eval-repeats 9] [--mlgym-root PATH]

- turn_overhead_ms_median / _p95: time env_response spends per turn beyond the command itself
  (reply parsing, marker scan, observation, bookkeeping), from 300 turns of ``true`` in one
  rollout: env_response's wall time minus the command's own duration as the shell measured it.
  The model is not involved (env_response is called directly). Target: <= 5 ms median.
- rollouts_per_min_32: 32 rollouts at once on the built-in game task laneMerge through
  verifiers' rollout path (HTTP to the scripted server, fresh containers, workspace set-up,
  a validate and a submit evaluation each, container teardown), as rollouts per minute.
- eval_overhead_ratio: a game's evaluation (laneMerge's evaluate.py, ~20,000 calls of the agent's
  row_strategy) with the agent's code behind the process boundary, over the same evaluation with the
  agent's module imported into the evaluator as MLGym does (medians of --eval-repeats, alternated, in one
  container, whole ``TaskWorkspace.evaluate`` calls). Target: <= 2.0. With --mlgym-root, the same for
  MLGym's battleOfSexes (~100,000 calls): eval_overhead_ratio_battleOfSexes.
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
from air.env.mlgym_env import STATE_KEY  # noqa: E402
from air.policies.scripted import make_policy  # noqa: E402
from air.sandbox.config import SandboxConfig  # noqa: E402
from air.sandbox.container import Sandbox  # noqa: E402
from air.serving.server import PolicyServer  # noqa: E402
from air.tasks.loader import load_task  # noqa: E402
from air.tasks.workspace import TaskWorkspace  # noqa: E402


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


async def eval_overhead(task_name: str, root: str | None, repeats: int) -> dict[str, float]:
    """Median evaluation time with and without the process boundary, alternated in one container."""
    task = load_task(task_name, root) if root else load_task(task_name)
    sandbox = await Sandbox.create(SandboxConfig(run_id="bench-env"))
    try:
        behind = TaskWorkspace(task, sandbox)
        await behind.setup()
        direct = TaskWorkspace(task, sandbox, agent_code_boundary=False)
        direct.python = behind.python
        times: dict[str, list[float]] = {"with": [], "without": []}
        scores: dict[str, list[float]] = {"with": [], "without": []}
        for _ in range(repeats):
            for label, workspace in (("with", behind), ("without", direct)):
                evaluation = await workspace.evaluate()
                if not evaluation.ok:
                    raise SystemExit(f"{task_name} evaluation ({label} the boundary) failed: {evaluation.error}")
                times[label].append(evaluation.duration_s)
                scores[label].append(float(evaluation.score))
    finally:
        await sandbox.destroy()
    with_s, without_s = statistics.median(times["with"]), statistics.median(times["without"])
    return {
        "ratio": with_s / without_s,
        "with_s": with_s,
        "without_s": without_s,
        "score_with": statistics.mean(scores["with"]),
        "score_without": statistics.mean(scores["without"]),
    }


async def main_async(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="air-bench-") as tmp:
        overheads = await turn_overhead(args.turns, Path(tmp))
        seconds = await concurrent_rollouts(args.rollouts, args.policy, Path(tmp) / "trajectories")
    games = {"laneMerge": await eval_overhead("laneMerge", None, args.eval_repeats)}
    if args.mlgym_root:
        games["battleOfSexes"] = await eval_overhead("battleOfSexes", args.mlgym_root, args.eval_repeats)
    overheads.sort()
    evals: dict[str, float] = {}
    for name, figures in games.items():
        suffix = "" if name == "laneMerge" else f"_{name}"
        evals[f"eval_overhead_ratio{suffix}"] = figures["ratio"]
        for key in ("with_s", "without_s", "score_with", "score_without"):
            evals[f"eval_{key}_{name}"] = figures[key]
    return {
        **evals,
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
    parser.add_argument("--eval-repeats", type=int, default=9, help="evaluations per side for eval_overhead_ratio")
    parser.add_argument("--mlgym-root", help="an MLGym checkout: also measure battleOfSexes")
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>28}: {value:.2f}" if isinstance(value, float) else f"{key:>28}: {value}")


if __name__ == "__main__":
    main()
