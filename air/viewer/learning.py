"""A run's learning curve, step by step: mean reward, the share of turns that carried a valid command, the
share of rollouts that validated, the task's score and the reward lost to format errors. From prime-rl's
``metrics.jsonl`` where it has a series (today's prime-rl writes it; c87c19b does not), else from the run's
trajectories grouped by their step. No Streamlit here: ``learning_curve`` is the whole computation.

The keys read from ``metrics.jsonl`` (prime-rl's orchestrator: ``<prefix>/<subset>/<agent>/...``, the
``all`` subset, the agent ``player`` where there is one; the env's metrics are batch means over rollouts):

    train/agg/all/<agent>/reward/mean                            mean reward
    train/agg/all/<agent>/metrics/format_errors/mean             valid share = 1 - format_errors / turns
    train/agg/all/<agent>/metrics/turns/mean                       (both means over the same rollouts)
    train/agg/all/<agent>/metrics/scored/mean                    validate share: rollouts scored
    train/<env>/all/<agent>/metrics/<task>/final_score/mean      task score among scored rollouts, where
    train/<env>/all/<agent>/metrics/<task>/baseline_score/mean     an unscored rollout reports the baseline:
    train/<env>/all/<agent>/metrics/scored/mean                    (final - (1 - scored) * baseline) / scored
    progress/rollouts                                            rollouts in the step
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from air.env.rewards import RewardSettings
from air.viewer import rl_run
from air.viewer.index import RolloutSummary, TrajectoryIndex

StepMetrics = dict[int, dict[str, float]]  # step -> the keys of its lines in metrics.jsonl (merged)

REWARD_KEY = "train/agg/all/{agent}/reward/mean"
METRIC_KEY = "train/{env}/all/{agent}/metrics/{name}/mean"
ROLLOUTS_KEY = "progress/rollouts"
AGENT = "player"  # air's agent in today's prime-rl; another name is taken when it is the only one
_KEPT = re.compile(r"^train/[^/]+/all/[^/]+/(reward|metrics/.+)/mean$")
_REWARD = re.compile(r"^train/agg/all/([^/]+)/reward/mean$")
CANCELLED = "cancelled"  # a rollout cut short: no reward, no place on the curve (stats.CANCELLED)

# The chart's panels, in order: (field, title). Task scores come third, one panel per task.
SERIES = {
    "reward": "mean reward",
    "valid_share": "valid-command share",
    "validate_share": "validate share",
    "format_penalty": "format penalty",
}


@dataclass(frozen=True)
class StepRow:
    """One training step of one run. A series the run's files do not give is None."""

    step: int
    rollouts: int | None
    reward: float | None  # mean rollout reward
    valid_share: float | None  # share of turns (model replies) that carried a valid command
    validate_share: float | None  # share of rollouts with a validate or a score (metrics.jsonl: scored)
    format_penalty: float | None  # reward lost to format errors, mean per rollout (errors x penalty)
    task_scores: dict[str, float] = field(default_factory=dict)  # task -> mean final score of scored rollouts
    source: str = ""  # "metrics.jsonl", "trajectories", or both joined by "+"


def read_step_metrics(path: Path) -> StepMetrics:
    """``metrics.jsonl``'s lines merged per step (the trainer and the orchestrator each write one per step),
    keeping only the keys ``learning_curve`` reads. A line that is not whole JSON (one being written) is
    skipped; a missing file is no steps."""
    steps: StepMetrics = defaultdict(dict)
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            row = json.loads(line)
        except ValueError:
            continue
        step = row.get("step") if isinstance(row, dict) else None
        if not isinstance(step, int) or isinstance(step, bool):
            continue
        steps[step].update(
            (key, float(value))
            for key, value in row.items()
            if (key == ROLLOUTS_KEY or _KEPT.match(key)) and _finite(value)
        )
    return dict(steps)


def learning_curve(
    run_dir: Path | str,
    rollouts: Iterable[RolloutSummary] | None = None,
    *,
    metrics: StepMetrics | None = None,
    penalty: float | None = None,
) -> list[StepRow]:
    """Per step of the run in ``run_dir``, sorted: each series from ``metrics.jsonl`` where it has it, else
    from the trajectories of that step. ``rollouts``: the run's trajectories as the viewer indexed them
    (default: read from the run folder and from the env's ``trajectory_dir`` its configs name);
    ``metrics``: ``read_step_metrics`` of its file (default: read here); ``penalty``: per format error
    (default: the configs' ``reward.format_error_penalty``, else the env's default)."""
    run = Path(run_dir)
    if metrics is None:
        metrics = read_step_metrics(run / rl_run.METRICS_FILE)
    if rollouts is None:
        rollouts = [r for folder in rl_run.trajectory_folders(run) if folder.is_dir() for r in _indexed(folder)]
    if penalty is None:
        penalty = rl_run.format_error_penalty(run)
    if penalty is None:
        penalty = RewardSettings().format_error_penalty
    from_metrics = _from_metrics(metrics, penalty)
    from_trajectories = _from_trajectories(rollouts, penalty)
    return [
        _merge(step, from_metrics.get(step), from_trajectories.get(step))
        for step in sorted(from_metrics.keys() | from_trajectories.keys())
    ]


def learning_table(curves: Mapping[str, list[StepRow]]) -> pd.DataFrame:
    """The chart's long table, one row per (run, step, series) with a value: columns run, step, series,
    value, source. ``curves``: run name -> its rows."""
    records = []
    for run, rows in curves.items():
        for row in rows:
            values = [(title, getattr(row, name)) for name, title in SERIES.items()]
            values[2:2] = [(f"task score: {task}", score) for task, score in sorted(row.task_scores.items())]
            records += [
                {"run": run, "step": row.step, "series": title, "value": value, "source": row.source}
                for title, value in values
                if value is not None
            ]
    return pd.DataFrame(records, columns=["run", "step", "series", "value", "source"])


def series_order(table: pd.DataFrame) -> list[str]:
    """The panels in the order SERIES gives them, task scores after the valid-command share."""
    tasks = sorted(s for s in table["series"].unique() if s.startswith("task score: "))
    titles = list(SERIES.values())
    return [s for s in [*titles[:2], *tasks, *titles[2:]] if s in set(table["series"])]


# --- metrics.jsonl ------------------------------------------------------------------------------------------


def _agent(metrics: StepMetrics) -> str | None:
    agents = sorted({m.group(1) for keys in metrics.values() for key in keys if (m := _REWARD.match(key))})
    if not agents:
        return None
    return AGENT if AGENT in agents else agents[0]


def _from_metrics(metrics: StepMetrics, penalty: float) -> dict[int, StepRow]:
    agent = _agent(metrics) or AGENT
    rows = {}
    for step, values in metrics.items():
        errors, turns = _metric(values, agent, "format_errors"), _metric(values, agent, "turns")
        rollouts = values.get(ROLLOUTS_KEY)
        rows[step] = StepRow(
            step=step,
            rollouts=int(rollouts) if rollouts is not None else None,
            reward=values.get(REWARD_KEY.format(agent=agent)),
            valid_share=1 - errors / turns if errors is not None and turns else None,
            validate_share=_metric(values, agent, "scored"),
            format_penalty=errors * penalty if errors is not None else None,
            task_scores=_task_scores(values, agent),
            source="metrics.jsonl",
        )
    return rows


def _metric(values: dict[str, float], agent: str, name: str, env: str = "agg") -> float | None:
    return values.get(METRIC_KEY.format(env=env, agent=agent, name=name))


def _task_scores(values: dict[str, float], agent: str) -> dict[str, float]:
    """Mean final score among scored rollouts, per task: from the env's own keys (whose scored share counts
    that env's rollouts only), the aggregate's for a task no env names."""
    final = re.compile(rf"^train/([^/]+)/all/{re.escape(agent)}/metrics/(.+)/final_score/mean$")
    found: dict[str, float] = {}
    for key in sorted(values, key=lambda k: k.startswith("train/agg/")):  # each env's first, the aggregate last
        match = final.match(key)
        if match is None or match.group(2) in found:
            continue
        env, task = match.groups()
        scored = _metric(values, agent, "scored", env)
        baseline = _metric(values, agent, f"{task}/baseline_score", env)
        if scored and scored > 0 and baseline is not None:
            found[task] = (values[key] - (1 - scored) * baseline) / scored
    return found


# --- trajectories -------------------------------------------------------------------------------------------


def _indexed(folder: Path) -> list[RolloutSummary]:
    return TrajectoryIndex(folder).refresh().rollouts


def _from_trajectories(rollouts: Iterable[RolloutSummary], penalty: float) -> dict[int, StepRow]:
    by_step: dict[int, list[RolloutSummary]] = defaultdict(list)
    for rollout in rollouts:
        if rollout.step is not None and rollout.exit_status != CANCELLED:
            by_step[rollout.step].append(rollout)
    rows = {}
    for step, group in by_step.items():
        rewards = [r.reward for r in group if r.reward is not None]
        turns = sum(r.turns for r in group)
        errors = sum(r.format_errors for r in group)
        scores: dict[str, list[float]] = defaultdict(list)
        for r in group:
            if r.last_score is not None:
                scores[r.task].append(r.last_score)
        rows[step] = StepRow(
            step=step,
            rollouts=len(group),
            reward=sum(rewards) / len(rewards) if rewards else None,
            valid_share=1 - errors / turns if turns else None,
            validate_share=sum(r.validates > 0 or r.last_score is not None for r in group) / len(group),
            format_penalty=errors / len(group) * penalty,
            task_scores={task: sum(values) / len(values) for task, values in scores.items()},
            source="trajectories",
        )
    return rows


def _merge(step: int, metrics: StepRow | None, trajectories: StepRow | None) -> StepRow:
    if metrics is None or trajectories is None:
        row = metrics or trajectories
        assert row is not None
        return row
    values: dict[str, object] = {}
    used = set()
    for name in ("rollouts", "reward", "valid_share", "validate_share", "format_penalty"):
        first, second = getattr(metrics, name), getattr(trajectories, name)
        values[name] = first if first is not None else second
        used.add("metrics.jsonl" if first is not None else "trajectories" if second is not None else "")
    scores = {**trajectories.task_scores, **metrics.task_scores}
    if set(trajectories.task_scores) - set(metrics.task_scores):
        used.add("trajectories")
    if metrics.task_scores:
        used.add("metrics.jsonl")
    source = "+".join(s for s in ("metrics.jsonl", "trajectories") if s in used)
    return StepRow(step=step, task_scores=scores, source=source, **values)  # type: ignore[arg-type]


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
