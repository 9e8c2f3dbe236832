"""Reading trajectory files: our JSON records and MLGym's own runs (a run folder's ``.traj`` files and
``results.json``), found at any depth and read into the same record."""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import re
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from air.env.actions import message_text
from air.env.trajectories import (
    BaselineInfo,
    TrajectoryError,
    TrajectoryRecord,
    Turn,
    TurnEvaluation,
    _describe,
    _parse,
    _read_bytes,
    recorded_evaluations,
    summary_metrics,
)
from air.tasks.config import KNOWN_PRIMARY_METRICS, lower_is_better, metric_value


def load_trajectory(path: Path | str) -> TrajectoryRecord:
    """Read our JSON file, an MLGym ``.traj`` file, or an MLGym run folder."""
    path = Path(path)
    if path.is_dir():
        return read_mlgym_run(path)
    if path.suffix == ".traj":
        results = path.parent / "results.json"
        return read_mlgym_traj(path, results if results.is_file() else None)
    raw = _read_bytes(path)
    try:
        return TrajectoryRecord.model_validate_json(raw)
    except ValidationError as exc:
        hint = " (this is MLGym's results.json: load its run folder instead)" if _looks_like_results(raw) else ""
        raise TrajectoryError(f"{path}: {_describe(exc)}{hint}") from None


def _looks_like_results(raw: bytes) -> bool:
    try:
        value = json.loads(raw)
    except ValueError:
        return False
    return isinstance(value, dict) and set(value) == {"agent", "baseline"}


# --- finding trajectories ----------------------------------------------------------------------

# MLGym's per-run score file; `air standalone`'s run summary (next to its trajectories/ folder).
# Our records are named <stamp>-<id>.json, so neither name can be one.
_NOT_OURS = {"results.json", "summary.json"}


def iter_trajectory_paths(directory: Path | str) -> Iterator[Path]:
    """Our ``*.json`` files at any depth and MLGym run folders, sorted; temp and hidden files skipped."""
    root = Path(directory)
    if not root.is_dir():
        raise FileNotFoundError(f"{root}: no such folder")
    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        here = Path(dirpath)
        if _is_mlgym_run(here, filenames):
            found.append(here)
            dirnames.clear()
            continue
        # W&B's own folder (a run's wandb/: its tables, summary and metadata are JSON too) is not ours.
        dirnames[:] = [d for d in dirnames if not d.startswith(".") and d != "wandb"]
        found += [
            here / name
            for name in filenames
            if name.endswith(".json")
            and not name.startswith((".", "wandb-"))
            and name not in _NOT_OURS
            and not name.endswith(".table.json")
        ]
    return iter(sorted(found))


def _is_mlgym_run(folder: Path, filenames: list[str]) -> bool:
    if any(name.endswith(".traj") for name in filenames):
        return True
    # MLGym left some runs with results.json and no .traj: still a run, with scores and no turns.
    return "results.json" in filenames and parse_mlgym_run_name(folder.name) is not None


# --- what a recording says ---------------------------------------------------------------------


def recorded_commands(source: Path | str | TrajectoryRecord) -> list[str]:
    """The commands in order, without format errors and turns without one (for a replay policy)."""
    record = source if isinstance(source, TrajectoryRecord) else load_trajectory(source)
    return [t.command for t in record.turns if t.command and t.command.strip() and t.format_error is None]


def recorded_scores(source: Path | str | TrajectoryRecord) -> list[float | None]:
    """The primary score of each evaluation, in order (to compare a replay against the recording)."""
    record = source if isinstance(source, TrajectoryRecord) else load_trajectory(source)
    return [e.score for e in recorded_evaluations(record)]


# MLGym's files are foreign input whose format may grow: unknown keys are ignored, types checked.
_MLGYM_CONFIG = ConfigDict(extra="ignore")


class _MlgymStep(BaseModel):
    model_config = _MLGYM_CONFIG
    action: str
    observation: str = ""
    response: str = ""
    thought: str = ""
    execution_time: float | None = None


class _MlgymInfo(BaseModel):
    model_config = _MLGYM_CONFIG
    exit_status: str = ""
    submission: str | None = None
    score: list[dict[str, Any]] = Field(default_factory=list)
    model_stats: dict[str, Any] = Field(default_factory=dict)


class _MlgymTraj(BaseModel):
    model_config = _MLGYM_CONFIG
    environment: str | None = None
    trajectory: list[_MlgymStep]
    history: list[dict[str, Any]] = Field(default_factory=list)
    info: _MlgymInfo = Field(default_factory=_MlgymInfo)


class _MlgymResults(BaseModel):
    model_config = _MLGYM_CONFIG
    agent: list[dict[str, Any]] = Field(default_factory=list)
    baseline: dict[str, Any] = Field(default_factory=dict)


_RUN_NAME = re.compile(
    r"(?P<model>.+?)__(?P<task>.+?)__(?P<config>.+?)__t-(?P<temperature>-?[\d.]+)__p-(?P<top_p>[\d.]+)"
    r"__c-(?P<cost_limit>[\d.]+)__install-(?P<install>\d+)(?:__?(?P<suffix>.*?))?_run_(?P<run>\d+)"
)
_SCORE_LINE = re.compile(r"^Evaluation Score: (.*)$", re.MULTILINE)
_BASELINE_LINE = re.compile(r"^Baseline Score: (.*)$", re.MULTILINE)
_TIMED_OUT = re.compile(r"^(EXECUTION TIMED OUT|Error: Timeout reached)", re.MULTILINE)
# `validate` as a command: also `validate submission.csv` and `python train.py && validate`
_VALIDATE = re.compile(r"(?:^|[;&|]\s*)validate(?=$|[\s;&|])")
_EXIT_ACTION = re.compile(r"exit_[a-z_]+")  # MLGym's pseudo-actions: exit_context, exit_format, exit_cost
_FINAL_STATUSES = {"evaluation_format_error", "submission_not_found"}


def parse_mlgym_run_name(name: str) -> dict[str, Any] | None:
    """The parts of an MLGym run folder's name, or None when it is not one."""
    match = _RUN_NAME.fullmatch(name)
    if match is None:
        return None
    parts: dict[str, Any] = match.groupdict()
    for key in ("temperature", "top_p", "cost_limit"):
        parts[key] = float(parts[key])
    parts["install"], parts["run"] = int(parts["install"]), int(parts["run"])
    parts["suffix"] = parts["suffix"] or None
    return parts


def read_mlgym_run(folder: Path | str) -> TrajectoryRecord:
    """Convert an MLGym run folder (``<task>.traj`` and ``results.json``)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise TrajectoryError(f"{folder}: not a folder")
    results = folder / "results.json"
    results_path = results if results.is_file() else None
    trajs = sorted(folder.glob("*.traj"))
    run = parse_mlgym_run_name(folder.name)
    if len(trajs) > 1:  # the run's own task names the file; anything else is ambiguous
        trajs = [p for p in trajs if run and p.stem == run["task"]]
        if len(trajs) != 1:
            raise TrajectoryError(f"{folder}: several .traj files and none named after the run's task")
    if trajs:
        return read_mlgym_traj(trajs[0], results_path)
    if results_path is None or run is None:
        raise TrajectoryError(f"{folder}: no .traj file and no results.json in an MLGym-named folder")
    return _scores_only_run(folder, results_path, run)


def read_mlgym_traj(path: Path | str, results: Mapping[str, Any] | Path | str | None = None) -> TrajectoryRecord:
    """Convert one MLGym ``.traj`` file; ``results`` is its run's results.json (path or parsed dict)."""
    path = Path(path)
    traj: _MlgymTraj = _parse(_MlgymTraj, _read_bytes(path), path)
    res = _load_results(results)
    run = parse_mlgym_run_name(path.parent.name) or {}
    task = path.stem  # MLGym names the file after the task's id
    scores = traj.info.score or (res.agent if res else [])
    baseline = _mlgym_baseline(task, res.baseline if res and res.baseline else _baseline_in_observations(traj), scores)

    turns, used = [], 0
    for index, step in enumerate(traj.trajectory, start=1):
        action = step.action
        evaluation = None
        if _VALIDATE.search(action.strip()):
            evaluation, used = _validate_evaluation(step.observation, scores, used, baseline.metric)
        turns.append(
            Turn(
                index=index,
                model_text=step.response,
                command=None if _EXIT_ACTION.fullmatch(action.strip()) else action,
                output=step.observation,
                duration_s=step.execution_time or 0.0,
                timed_out=bool(_TIMED_OUT.search(step.observation)),
                evaluation=evaluation,
            )
        )
    submitted = bool(turns) and (turns[-1].command or "").split()[:1] == ["submit"]
    final = _final_evaluation(traj.info.exit_status, scores[used:], baseline.metric, submitted)
    if final is not None and final.kind == "submit" and turns[-1].evaluation is None:
        turns[-1].evaluation = final

    messages = [m for m in traj.history if isinstance(m, dict)]
    source_info: dict[str, Any] = {
        "path": str(path),
        "environment": traj.environment,
        "submission": traj.info.submission,
        "model_stats": traj.info.model_stats,
    }
    leftover = scores[used : -1 if final is not None and final.metrics is not None else None]
    if leftover:  # never seen in MLGym's published runs; kept rather than dropped
        source_info["unplaced_scores"] = leftover
    return _mlgym_record(
        path,
        task=task,
        run=run,
        started_at=_mtime(path),
        exit_status=traj.info.exit_status,
        baseline=baseline,
        final_evaluation=final,
        turns=turns,
        system_prompt=_first_message(messages, "system"),
        task_prompt=_first_message(messages, "user"),
        source_info=source_info,
    )


def _load_results(results: Mapping[str, Any] | Path | str | None) -> _MlgymResults | None:
    if results is None:
        return None
    if isinstance(results, Mapping):
        try:
            return _MlgymResults.model_validate(dict(results))
        except ValidationError as exc:
            raise TrajectoryError(f"results given as a dict: {_describe(exc)}") from None
    path = Path(results)
    return _parse(_MlgymResults, _read_bytes(path), path)


def _mlgym_baseline(task: str, metrics: dict[str, Any], scores: list[dict[str, Any]]) -> BaselineInfo:
    """Primary metric: air's known table by task id, else the baseline's first key (else the first score's)."""
    if task in KNOWN_PRIMARY_METRICS:
        metric, higher = KNOWN_PRIMARY_METRICS[task]
    else:
        metric = next(iter(metrics or (scores[0] if scores else {})), None)
        higher = not lower_is_better(metric)
    score = metric_value(metrics, metric) if metric else None
    return BaselineInfo(metric=metric, score=score, higher_is_better=higher, metrics=metrics)


def _baseline_in_observations(traj: _MlgymTraj) -> dict[str, Any]:
    """Without results.json, MLGym's validate output still shows the baseline."""
    for step in traj.trajectory:
        match = _BASELINE_LINE.search(step.observation)
        if match and isinstance(value := _literal_dict(match.group(1)), dict):
            return value
    return {}


def _literal_dict(text: str) -> dict[str, Any] | None:
    try:
        value = ast.literal_eval(text.strip())  # MLGym prints Python dict reprs, not JSON
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _score(metrics: dict[str, Any] | None, metric: str | None) -> float | None:
    if not metrics:
        return None
    if metric:
        return metric_value(metrics, metric)
    return next((float(v) for v in metrics.values() if isinstance(v, int | float) and not isinstance(v, bool)), None)


def _validate_evaluation(
    observation: str, scores: list[dict[str, Any]], used: int, metric: str | None
) -> tuple[TurnEvaluation | None, int]:
    """A validate's evaluation from its output. The k-th validate that shows an 'Evaluation Score'
    gets the k-th score dict of info.score (results.json), which MLGym appends in the same order."""
    if observation.startswith("Exited ("):  # the episode ended before the action ran
        return None, used
    match = _SCORE_LINE.search(observation)
    if match:
        metrics = scores[used] if used < len(scores) else _literal_dict(match.group(1))
        if metrics is None:
            error = "the score in the output could not be read"
            return TurnEvaluation(status="evaluation_format_error", score=None, metrics=None, error=error), used
        return TurnEvaluation(status="ok", score=_score(metrics, metric), metrics=metrics), used + 1
    text = observation.strip()
    if text.startswith("Failed to decode metrics"):
        status = "evaluation_format_error"
    elif text.startswith("Submission artefact not found"):
        status = "submission_not_found"
    else:
        status = "evaluation_failed"
    return TurnEvaluation(status=status, score=None, metrics=None, error=text or "no output"), used


def _final_evaluation(
    exit_status: str, remaining: list[dict[str, Any]], metric: str | None, submitted: bool
) -> TurnEvaluation | None:
    """The end-of-episode evaluation MLGym's exit status implies; its score is the last one recorded."""
    reason = exit_status.partition(" (")[0]
    kind = "submit" if submitted else "final"
    if reason in ("submitted", "autosubmission"):
        if not remaining:
            error = f"MLGym recorded no score for this submission (exit status {exit_status!r})"
            return TurnEvaluation(status="evaluation_failed", score=None, metrics=None, error=error, kind=kind)
        metrics = remaining[-1]
        return TurnEvaluation(status="ok", score=_score(metrics, metric), metrics=metrics, kind=kind)
    if reason in _FINAL_STATUSES:
        error = f"MLGym exit status {exit_status!r}"
        return TurnEvaluation(status=reason, score=None, metrics=None, error=error, kind=kind)
    return None  # '', unknown_error, ...: no final evaluation happened


def _first_message(messages: list[dict[str, Any]], role: str) -> str | None:
    for message in messages:
        if message.get("role") == role:
            return message_text(message) if message.get("content") is not None else None
    return None


def _mtime(path: Path) -> datetime:
    # MLGym records no clock time: the file's modification time is the only one there is.
    return datetime.fromtimestamp(path.stat().st_mtime, tz=UTC)


def _scores_only_run(folder: Path, results_path: Path, run: dict[str, Any]) -> TrajectoryRecord:
    """A run folder MLGym left without its .traj: the scores are known, the turns are not."""
    res: _MlgymResults = _parse(_MlgymResults, _read_bytes(results_path), results_path)
    baseline = _mlgym_baseline(run["task"], res.baseline, res.agent)
    record = _mlgym_record(
        folder,
        task=run["task"],
        run=run,
        started_at=_mtime(results_path),
        exit_status="unknown",
        baseline=baseline,
        error="the run folder has no .traj file: only results.json's scores are known",
        source_info={"path": str(folder), "scores": res.agent},
    )
    scores = [s for m in res.agent if (s := _score(m, baseline.metric)) is not None and not math.isnan(s)]
    if scores:
        record.metrics["best_score"] = max(scores) if baseline.higher_is_better else min(scores)
    return record


def _mlgym_record(origin: Path, *, task: str, run: dict[str, Any], **fields: Any) -> TrajectoryRecord:
    folder = origin if origin.is_dir() else origin.parent
    sampling = {k: run[k] for k in ("temperature", "top_p") if k in run}
    settings_keys = ("config", "cost_limit", "install", "suffix", "run")
    settings = {k: run[k] for k in settings_keys if run.get(k) is not None}
    # Stable across machines and re-reads: the same run always gets the same id.
    rollout_id = hashlib.sha256(f"{folder.name}/{origin.name}".encode()).hexdigest()[:32]
    try:
        record = TrajectoryRecord(
            source="mlgym",
            id=rollout_id,
            task=task,
            task_id=task,
            model=run.get("model"),
            sampling_args=sampling,
            env_settings=settings,
            **fields,
        )
    except ValidationError as exc:
        raise TrajectoryError(f"{origin}: {_describe(exc)}") from None
    record.metrics = summary_metrics(record)
    return record
