"""Does SmolLM2-135M-Instruct learn through prime-rl on this CPU? A learning run beside a control from the same start.

    uv run python benchmarks/learning.py --prime-rl DIR [--steps 12] [--lr 1e-5] [--seed 0] [--json]
        [--out outputs/learning] [--only learn|control]

DIR: today's prime-rl installed by ``install_prime_rl.sh --cpu --commit 559b447 DIR``. Two runs of prime-rl's
own ``rl`` (its vLLM server on vLLM's CPU build, its orchestrator and env server, its trainer) on the shipped
``configs/mlgym-v1/rl_cpu.toml`` (SmolLM2, laneMerge in containers, 4 rollouts a step), changed only in
``max_steps`` (``--steps``), the learning rate (``--lr``; the control's is 0: AdamW's weight decay is scaled by it,
so its weights cannot move), vLLM's seed (``--seed``, the same for both) and where trajectories go. Same start
weights, same seed: the first step's samples are alike, what follows differs only by what the trainer learned.

Per step: the rollouts' mean reward, from the orchestrator's ``metrics.jsonl``. The comparison: the per-step means
of the last half of the steps, learning minus control, with Welch's t and a one-sided permutation p-value
(10,000 shuffles); and every rollout's reward from the trajectories. Figures go to experiments.md.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from air.serving.models.smollm2 import prepare_smollm2  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CONFIG = ROOT / "configs" / "mlgym-v1" / "rl_cpu.toml"
REWARD = "train/agg/all/player/reward/mean"


def run_config(out: Path) -> Path:
    """The shipped CPU config, its trajectories in this run's folder (nothing else changed)."""
    text = CONFIG.read_text()
    changed = re.sub(r'(?m)^run_id = "rl-cpu"$', f'run_id = "rl-cpu"\ntrajectory_dir = "{out / "trajectories"}"', text)
    if changed == text:
        raise SystemExit(f"{CONFIG}: no run_id line to put trajectory_dir after")
    path = out / "rl_cpu.toml"
    path.write_text(changed)
    return path


def one_run(label: str, lr: float, args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    out = (Path(args.out) / label).resolve()
    out.mkdir(parents=True, exist_ok=True)
    checkout = Path(args.prime_rl).expanduser().resolve()
    command = [
        "uv", "run", "rl", "@", str(run_config(out)), "--model.name", str(model_dir), "--output-dir", str(out / "rl"),
        "--max-steps", str(args.steps), "--trainer.optim.lr", str(lr), "--inference.vllm.seed", str(args.seed),
    ]  # fmt: skip
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(checkout / ".venv-orchestrator"), "UV_NO_SYNC": "1"}
    started = time.perf_counter()
    with open(out / "rl.log", "w") as log:
        code = subprocess.run(command, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"{label}: rl exited {code}; see {out / 'rl.log'}")
    (metrics,) = (out / "rl").glob("*/metrics.jsonl")
    steps = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()]
    curve = [{"step": s["step"], "reward_mean": s[REWARD]} for s in steps if REWARD in s]
    rewards = []
    for path in sorted((out / "trajectories").rglob("*.json")):
        reward = json.loads(path.read_text()).get("reward")
        if reward is not None:  # None: an episode cancelled at the run's end
            rewards.append(float(reward))
    return {"label": label, "lr": lr, "seconds": seconds, "curve": curve, "rollout_rewards": rewards}


def welch_and_permutation(a: list[float], b: list[float], rounds: int = 10_000) -> dict[str, float]:
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    var_a = sum((x - mean_a) ** 2 for x in a) / max(1, len(a) - 1)
    var_b = sum((x - mean_b) ** 2 for x in b) / max(1, len(b) - 1)
    t = (mean_a - mean_b) / math.sqrt(var_a / len(a) + var_b / len(b) + 1e-18)
    rng, pooled, observed, hits = random.Random(0), a + b, mean_a - mean_b, 0
    for _ in range(rounds):
        rng.shuffle(pooled)
        hits += (sum(pooled[: len(a)]) / len(a) - sum(pooled[len(a) :]) / len(b)) >= observed
    return {"learn_mean": mean_a, "control_mean": mean_b, "difference": observed, "welch_t": t,
            "permutation_p_one_sided": (hits + 1) / (rounds + 1)}  # fmt: skip


def compare(learn: dict[str, Any], control: dict[str, Any]) -> dict[str, Any]:
    half = len(learn["curve"]) // 2
    a = [s["reward_mean"] for s in learn["curve"][half:]]
    b = [s["reward_mean"] for s in control["curve"][half:]]
    result = {"steps_compared": f"{half + 1}..{len(learn['curve'])}", **welch_and_permutation(a, b)}
    if learn["rollout_rewards"] and control["rollout_rewards"]:
        result["all_rollouts"] = welch_and_permutation(learn["rollout_rewards"], control["rollout_rewards"])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prime-rl", required=True, help="today's prime-rl, installed with --cpu")
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="outputs/learning")
    parser.add_argument("--only", choices=["learn", "control"], help="run one of the two")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model_dir = prepare_smollm2().path
    runs = {}
    for label, lr in (("learn", args.lr), ("control", 0.0)):
        if args.only in (None, label):
            runs[label] = one_run(label, lr, args, model_dir)
    result: dict[str, Any] = {"settings": vars(args), "runs": runs}
    if len(runs) == 2:
        result["comparison"] = compare(runs["learn"], runs["control"])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "result.json").write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result))
    else:
        for step in range(max(len(r["curve"]) for r in runs.values())):
            cells = [f"{k} {r['curve'][step]['reward_mean']:+.4f}" for k, r in runs.items() if step < len(r["curve"])]
            print(f"step {step + 1:3d}  " + "  ".join(cells))
        if "comparison" in result:
            print(json.dumps(result["comparison"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
