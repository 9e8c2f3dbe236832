"""The names of what a rollout reports (reward, scores, counts) and how to read them back; free of
verifiers and Docker, so standalone runs, W&B and the viewer read them without loading the env."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# Raw scores are in each task's own units (accuracy, r2, game score): averaging them across tasks means
# nothing, and prime-rl logs the batch mean of every metric as `metrics/<name>`. So an env serving one
# task names them `<task>/best_score`; an env serving several leaves them to the trajectories.
SCORE_METRICS = ("baseline_score", "best_score", "final_score")
# Comparable across tasks (normalised progress, counts): plain names.
METRIC_NAMES = (
    "improvement",
    "scored",
    "failed_evaluations",
    "suspicious_evaluations",
    "validates",
    "format_errors",
    "timeouts",
    "turns",
    "submitted",
)


# The rollout's reward as both fronts report it (the classic rubric's function, the v1 trace's reward).
REWARD_METRIC = "mlgym_reward"


def result_key(name: str) -> str:
    """Where a reported metric's value is in the core's result dict (``<task>/best_score`` -> ``best_score``)."""
    return "reward" if name == REWARD_METRIC else name.rpartition("/")[2]


def task_name_of(state: Mapping[str, Any]) -> str:
    """The MLGym task of a rollout: info["task_name"], else the `task` column (plain vf-eval)."""
    info = state.get("info") or {}
    return str(info.get("task_name") or state.get("task") or "")


def metric_names(task_names: list[str]) -> list[str]:
    """The metric names the rubric reports (``state["metrics"]``; prime-rl logs ``metrics/<name>``)."""
    scores = [f"{task_names[0]}/{name}" for name in SCORE_METRICS] if len(task_names) == 1 else []
    return scores + list(METRIC_NAMES)


def metric_value(metrics: dict[str, Any], name: str, task: str | None) -> Any:
    """A metric by its plain name, reported plain (counts, simple_env) or as ``<task>/<name>`` (raw scores)."""
    value = metrics.get(name)
    return value if value is not None or not task else metrics.get(f"{task}/{name}")
