"""Synthetic training runs for the viewer's tests and benchmark: records in air's own format,
shaped like a GRPO run (steps, groups of rollouts on several tasks, scores that improve with the
step, validates, format errors, timeouts, chatty replies with reasoning). Deterministic per seed.
Nothing here comes from MLGym; the task names are only labels."""

from __future__ import annotations

import hashlib
import json
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path

from air.env.trajectories import BaselineInfo, TrajectoryRecord, Turn, TurnEvaluation, write_trajectory
from rigs.mlgym_runs import write_mlgym_run

# name -> (metric, baseline, higher_is_better, best reachable score)
TASKS: dict[str, tuple[str, float, bool, float]] = {
    "titanic": ("accuracy", 0.766, True, 0.86),
    "regressionKaggleHousePrice": ("r2", 0.880, True, 0.92),
    "prisonersDilemma": ("Score", 2.372, True, 2.60),
    "lossTask": ("val_loss", 4.20, False, 3.60),
}
COMMANDS = [
    "ls -la",
    "cat train.py",
    "python train.py --epochs 3",
    "pip list | grep torch",
    "head -n 5 data/train.csv",
    "sed -n 1,40p evaluate.py",
    "python -c 'import sklearn; print(sklearn.__version__)'",
]
START = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)


def synthetic_record(
    rng: random.Random, *, task: str, step: int, group: int, member: int, steps: int, model: str = "synthetic-4b"
) -> TrajectoryRecord:
    """One rollout whose expected score rises with the step (a learning curve to chart)."""
    metric, baseline, higher, best = TASKS[task]
    progress = step / max(1, steps - 1)
    sign = 1 if higher else -1
    rollout_id = hashlib.sha1(f"{task}-{step}-{group}-{member}".encode()).hexdigest()
    turns: list[Turn] = []
    scores: list[float] = []
    for index in range(1, rng.randint(3, 12) + 1):
        reasoning = f"<think>Step {index}: the last output suggests checking the data again.</think>\n" * (index % 2)
        if rng.random() < 0.06:  # a format error: two commands in one reply
            text = reasoning + "I will run both.\n```bash\nls\n```\n```bash\npwd\n```"
            error = "Your reply had 2 fenced code blocks; reply with exactly one."
            turns.append(Turn(index=index, model_text=text, command=None, format_error=error, output=error))
            continue
        evaluation = None
        if rng.random() < 0.3:
            command = "validate"
            score = baseline + (best - baseline) * (progress * rng.uniform(0.3, 1.1) - rng.uniform(0, 0.4))
            scores.append(round(score, 4))
            evaluation = TurnEvaluation(status="ok", score=scores[-1], metrics={metric: scores[-1]}, duration_s=0.7)
            output = f"Your code produced a valid submission. Score: {{'{metric}': {scores[-1]}}}"
        else:
            command = rng.choice(COMMANDS)
            lines = range(rng.randint(1, 40))
            output = "\n".join(f"{command.split()[0]} line {n}: value={rng.random():.5f}" for n in lines)
        timed_out = command.startswith("python train") and rng.random() < 0.1
        turns.append(
            Turn(
                index=index,
                model_text=f"{reasoning}Next I run `{command}` to see what happens.\n```bash\n{command}\n```",
                command=command,
                output=output,
                exit_code=124 if timed_out else rng.choice([0, 0, 0, 0, 1]),
                duration_s=round(rng.uniform(0.01, 30 if command.startswith("python") else 0.5), 3),
                timed_out=timed_out,
                evaluation=evaluation,
                step_reward=None,
            )
        )
    submitted = rng.random() < 0.7
    final_score = scores[-1] if scores and submitted else None
    final = None
    if submitted and final_score is not None:
        final = TurnEvaluation(status="ok", score=final_score, metrics={metric: final_score}, kind="submit")
    elif submitted:
        final = TurnEvaluation(status="submission_not_found", score=None, metrics=None, error="no file", kind="final")
    improvement = None if final_score is None else sign * (final_score - baseline)
    reward = 0.0 if improvement is None else round(max(0.0, improvement) * 10, 4)
    started = START + timedelta(minutes=step * 10, seconds=group * 7 + member)
    duration = round(sum(t.duration_s for t in turns) + rng.uniform(1, 5), 3)
    return TrajectoryRecord(
        id=rollout_id,
        task=task,
        task_id=task,
        example_id=group,
        group_id=f"{step}-{group}",
        step=step,
        model=model,
        sampling_args={"temperature": 1.0},
        started_at=started,
        finished_at=started + timedelta(seconds=duration),
        duration_s=duration,
        exit_status="submitted" if submitted else rng.choice(["max_turns", "format_errors"]),
        baseline=BaselineInfo(metric=metric, score=baseline, higher_is_better=higher, metrics={metric: baseline}),
        final_evaluation=final,
        reward=reward,
        turns=turns,
    )


def write_synthetic_run(
    directory: Path, rollouts: int, *, seed: int = 0, group_size: int = 8, pad_output: int = 0
) -> list[Path]:
    """``rollouts`` records in ``directory/<task>/``: groups of ``group_size`` per task and step.
    ``pad_output`` adds about that many characters to every command output (real ones are longer)."""
    rng = random.Random(seed)
    tasks = list(TASKS)
    groups_per_step = len(tasks)
    steps = max(1, -(-rollouts // (group_size * groups_per_step)))
    paths = []
    for n in range(rollouts):
        group_index, member = divmod(n, group_size)
        step, group = divmod(group_index, groups_per_step)
        record = synthetic_record(rng, task=tasks[group], step=step, group=group, member=member, steps=steps)
        for turn in record.turns:
            turn.output += ("x" * 79 + "\n") * (pad_output // 80)
        paths.append(write_trajectory(record, directory))
    return paths


# --- a folder with everything the viewer must handle ------------------------------------------

MIXED_ROLLOUTS = 64  # the synthetic part: two steps of four tasks x groups of eight


def handmade_record() -> TrajectoryRecord:
    """A hand-written rollout with reasoning, a format error, a timeout and a validate."""
    return TrajectoryRecord(
        id="feedface0001",
        task="handmade",
        policy="scripted-improver",
        started_at=datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC),
        duration_s=173.0,
        exit_status="max_turns",
        baseline=BaselineInfo(metric="accuracy", score=0.5, metrics={"accuracy": 0.5}),
        reward=0.31,
        system_prompt="You are careful.",
        task_prompt="Make the classifier better.",
        turns=[
            Turn(
                index=1,
                model_text="<think>secret plan: look first</think>I list the files.\n```bash\nls -la\n```",
                command="ls -la",
                output="train.py\nquokka_data.csv",
                exit_code=0,
                duration_s=0.25,
            ),
            Turn(index=2, model_text="two blocks", command=None, format_error="2 fenced code blocks", output="err"),
            Turn(
                index=3,
                model_text="Train.\n```bash\npython train.py\n```",
                command="python train.py",
                output="epoch 1\nEXECUTION TIMED OUT",
                exit_code=124,
                duration_s=30.0,
                timed_out=True,
            ),
            Turn(
                index=4,
                model_text="Check.\n```bash\nvalidate\n```",
                command="validate",
                output="score 0.81",
                exit_code=0,
                duration_s=0.7,
                evaluation=TurnEvaluation(status="ok", score=0.81, metrics={"accuracy": 0.81}),
            ),
        ],
    )


BROKEN_RUN = "acme-7b__titanic__plain__t-0.00__p-1.00__c-1.00__install-0_run_0"


def write_mixed_folder(root: Path) -> Path:
    """Synthetic run + a nested hand-made record + an MLGym run + four unreadable entries."""
    write_synthetic_run(root / "train", MIXED_ROLLOUTS, seed=3)
    write_trajectory(handmade_record(), root / "deep" / "er" / "still")
    write_mlgym_run(root / "mlgym")
    (root / "broken.json").write_text("{not json")
    (root / "empty.json").write_text("")
    (root / "train" / "missing.json").write_text(json.dumps({"id": "abc", "task": "t"}))
    bad_run = root / "mlgym" / BROKEN_RUN
    bad_run.mkdir(parents=True)
    (bad_run / "titanic.traj").write_text(json.dumps({"trajectory": "not a list"}))
    return root


# --- a prime-rl `rl` run folder (today's prime-rl) --------------------------------------------

RL_RUN = "air-mlgym--smollm2-135m-instruct--1a2b3c4d"  # rl's own naming: <envs>--<model>--<8 hex>
RL_ENV = "air-mlgym"  # the train source's name: its keys are train/<env>/..., beside train/agg/...
RL_TASK = "laneMerge"
RL_BASELINE = 1.0
RL_TURNS = 4


def rl_rollout(step: int, member: int, group_size: int) -> tuple[int, float | None]:
    """Rollout ``member`` of ``step``: (its format errors, its score or None). Step s: the first ``group_size
    - s`` rollouts make one format error each, the first ``s + 1`` validate and are scored, at RL_BASELINE +
    0.1 (s + 1) + 0.01 member. So per step: valid share 1 - (n - s) / (n RL_TURNS), validate share
    (s + 1) / n, task score RL_BASELINE + 0.1 (s + 1) + 0.005 s (n = group_size, s < n)."""
    errors = 1 if member < group_size - step else 0
    scored = member < step + 1
    return errors, (round(RL_BASELINE + 0.1 * (step + 1) + 0.01 * member, 6) if scored else None)


def _rl_record(step: int, member: int, group_size: int, penalty: float) -> tuple[TrajectoryRecord, dict[str, float]]:
    """The rollout's trajectory and what the env reports for it (air.env's reward and metric names)."""
    from air.env.metrics import metric_names, result_key
    from air.env.rewards import RewardSettings, RewardTracker

    errors, score = rl_rollout(step, member, group_size)
    tracker = RewardTracker(baseline=RL_BASELINE, settings=RewardSettings(format_error_penalty=penalty))
    turns = [Turn(index=i + 1, model_text="two blocks", command=None, format_error="2 blocks", output="e") for i in
             range(errors)]  # fmt: skip
    while len(turns) < RL_TURNS - (score is not None):
        turns.append(Turn(index=len(turns) + 1, model_text="```bash\nls\n```", command="ls", output="a", exit_code=0))
    if score is not None:
        tracker.record(score)
        evaluation = TurnEvaluation(status="ok", score=score, metrics={"Score": score})
        turns.append(Turn(index=RL_TURNS, model_text="v", command="validate", output="ok", evaluation=evaluation))
    result = tracker.metrics() | {"validates": float(score is not None), "format_errors": float(errors),
                                  "timeouts": 0.0, "turns": float(RL_TURNS), "submitted": 0.0}  # fmt: skip
    result["reward"] = tracker.rollout_reward(errors)
    record = TrajectoryRecord(
        id=hashlib.sha1(f"rl-{step}-{member}".encode()).hexdigest(),
        task=RL_TASK,
        group_id=f"{step}-0",
        step=step,
        model="smollm2-135m-instruct",
        started_at=START + timedelta(minutes=step, seconds=member),
        exit_status="max_turns",
        baseline=BaselineInfo(metric="Score", score=RL_BASELINE, metrics={"Score": RL_BASELINE}),
        reward=result["reward"],
        turns=turns,
    )
    return record, {name: result[result_key(name)] for name in ["reward", *metric_names([RL_TASK])]}


def _batch_means(results: list[dict[str, float]], prefix: str) -> dict[str, float]:
    """prime-rl's orchestrator's keys for one batch (orchestrator/metrics.py: mean, max, min per series)."""
    out: dict[str, float] = {}
    for name in results[0]:
        values = [r[name] for r in results]
        key = f"{prefix}/all/player/{name if name == 'reward' else 'metrics/' + name}"
        out |= {f"{key}/mean": sum(values) / len(values), f"{key}/max": max(values), f"{key}/min": min(values)}
    out[f"{prefix}/all/num_turns/mean"] = float(RL_TURNS)
    out[f"{prefix}/effective/player/reward/mean"] = 99.0  # the trained-on subset: not the curve's
    return out


def write_rl_run(
    output_dir: Path, *, steps: int = 4, group_size: int = 4, penalty: float = 0.05,
    trajectory_dir: Path | None = None, metrics: bool = True,
) -> Path:  # fmt: skip
    """A run folder as ``rl @ config.toml --output-dir OUTPUT_DIR`` leaves it: configs (JSON, the env's
    arguments with ``reward.format_error_penalty`` and ``trajectory_dir``), logs, weights broadcast per step,
    traces, and ``metrics.jsonl`` (``metrics``: an orchestrator line and a trainer line per step, then a line
    cut short, as a live run's). The rollouts are ``rl_rollout``'s; their trajectories (with their step, as
    prime-rl c87c19b gives it) go to ``trajectory_dir`` when given. Returns the run folder."""
    run = output_dir / RL_RUN
    env_args = {"task_configs": [RL_TASK], "reward": {"format_error_penalty": penalty}, "run_id": "rl-cpu"}
    if trajectory_dir is not None:
        env_args["trajectory_dir"] = str(trajectory_dir.resolve())
    source = {"name": RL_ENV, "env": {"taskset": {"id": "air_mlgym", **env_args}, "player": {"harness": {}}}}
    (run / "configs" / "envs" / "train").mkdir(parents=True)
    (run / "configs" / "orchestrator.json").write_text(json.dumps({"train": {"source": [source]}}, indent=2))
    (run / "configs" / "envs" / "train" / f"{RL_ENV}.json").write_text(json.dumps({"env": source["env"]}))
    (run / "configs" / "trainer.json").write_text(json.dumps({"model": {"name": "smollm2"}, "optim": {"lr": 1e-5}}))
    (run / "configs" / "inference.json").write_text(json.dumps({"vllm": {"dtype": "float32"}}))
    (run / "logs" / "attempt_1").mkdir(parents=True)
    for name in ("orchestrator.log", "inference.log", "trainer.log"):
        (run / "logs" / "attempt_1" / name).write_text(f"{name}: started\n")
    (run / "logs" / "latest").symlink_to("attempt_1")
    lines = []
    for step in range(steps):
        pairs = [_rl_record(step, member, group_size, penalty) for member in range(group_size)]
        if trajectory_dir is not None:
            for record, _ in pairs:
                write_trajectory(record, trajectory_dir)
        results = [result for _, result in pairs]
        row = {"step": step, "time": 1.7e9 + step} | _batch_means(results, "train/agg")
        row |= _batch_means(results, f"train/{RL_ENV}") | {"progress/rollouts": group_size, "time/step": 2.5}
        lines += [json.dumps(row), json.dumps({"step": step, "time": 1.7e9 + step, "loss/mean": 0.01 * step})]
        broadcast = run / "broadcasts" / f"step_{step + 1}"
        broadcast.mkdir(parents=True)
        (broadcast / "config.json").write_text(json.dumps({"architectures": ["LlamaForCausalLM"]}))
        (broadcast / "STABLE").write_text("")
        traces = run / "rollouts" / f"step_{step}" / "train" / "all" / "traces.jsonl"
        traces.parent.mkdir(parents=True)
        traces.write_text(json.dumps({"id": f"episode-{step}", "traces": []}) + "\n")
    if metrics:
        (run / "metrics.jsonl").write_text("\n".join(lines) + '\n{"step": ' + str(steps) + ', "train/agg/al')
    return run
