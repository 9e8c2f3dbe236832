"""One JSON record per rollout, and readers that turn MLGym's own runs into the same record.

A rollout is saved as ``<dir>/<task>/<YYYYmmdd-HHMMSS>-<id[:12]>.json`` holding a
``TrajectoryRecord``. The viewer and the replay tool read those files and MLGym's run folders
(``<task>.traj`` + ``results.json``) through ``load_trajectory``. Every field, and how MLGym's
format maps onto it, is described in docs/trajectories.md.
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import json
import math
import os
import re
import tempfile
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticSerializationError

from air.actions import message_text
from air.tasks import KNOWN_PRIMARY_METRICS, lower_is_better, metric_value

SCHEMA_VERSION = 1


class TrajectoryError(ValueError):
    """A trajectory cannot be read or written; the message names the file and what is wrong."""


# --- the record --------------------------------------------------------------------------------

# Unknown keys are ignored on read: a file from a newer air-agent that only *adds* fields still
# loads. A change of meaning bumps SCHEMA_VERSION, and older readers refuse such files.
# NaN/inf scores are written as JSON's NaN/Infinity (Python's json reads them), not as null.
_RECORD_CONFIG = ConfigDict(extra="ignore", ser_json_inf_nan="constants")
_SAFE_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"  # task and id become path parts


class TurnEvaluation(BaseModel):
    """One evaluation of the workspace: at a validate, at submit, or at the end of the rollout."""

    model_config = _RECORD_CONFIG
    status: str  # "ok" | "submission_not_found" | "evaluation_format_error" | "evaluation_failed"
    score: float | None  # the primary metric's value
    metrics: dict[str, Any] | None
    error: str | None = None
    duration_s: float = 0.0
    kind: str = "validate"  # "validate" | "submit" | "final" (end-of-rollout evaluation)


class Turn(BaseModel):
    """One model reply and what came of it."""

    model_config = _RECORD_CONFIG
    index: int  # 1-based
    model_text: str
    command: str | None  # None on a format error (or an MLGym exit pseudo-action)
    format_error: str | None = None
    output: str = ""  # the observation shown to the model (may be capped)
    exit_code: int | None = None
    duration_s: float = 0.0
    timed_out: bool = False
    evaluation: TurnEvaluation | None = None
    step_reward: float | None = None
    executed_after_last_turn: bool = False  # the command ran at rollout end (max_turns)


class BaselineInfo(BaseModel):
    model_config = _RECORD_CONFIG
    metric: str | None
    score: float | None
    higher_is_better: bool = True
    metrics: dict[str, Any] = Field(default_factory=dict)


class TrajectoryRecord(BaseModel):
    """One rollout: one agent episode on one task."""

    model_config = _RECORD_CONFIG
    schema_version: int = SCHEMA_VERSION
    source: Literal["air", "mlgym"] = "air"
    id: str = Field(pattern=_SAFE_NAME)  # hex
    task: str = Field(pattern=_SAFE_NAME)  # task config file stem
    task_id: str | None = None
    example_id: int | None = None
    group_id: str | None = None
    step: int | None = None
    model: str | None = None
    policy: str | None = None
    sampling_args: dict[str, Any] = Field(default_factory=dict)
    image: str | None = None
    task_root: str | None = None
    env_settings: dict[str, Any] = Field(default_factory=dict)
    system_prompt: str | None = None
    task_prompt: str | None = None
    started_at: datetime
    finished_at: datetime | None = None
    duration_s: float | None = None
    exit_status: str
    error: str | None = None
    baseline: BaselineInfo
    final_evaluation: TurnEvaluation | None = None
    reward: float | None = None
    advantage: float | None = None
    metrics: dict[str, float] = Field(default_factory=dict)
    turns: list[Turn] = Field(default_factory=list)
    # Added: what a source records that has no field here (MLGym's model_stats, submission path,
    # run folder), kept so that converting loses nothing the viewer might show.
    source_info: dict[str, Any] = Field(default_factory=dict)

    @field_validator("schema_version")
    @classmethod
    def _known_version(cls, value: int) -> int:
        if not 1 <= value <= SCHEMA_VERSION:
            raise ValueError(f"schema version {value} is not one this air-agent reads (1..{SCHEMA_VERSION})")
        return value


# --- writing and reading our files -------------------------------------------------------------


def trajectory_path(record: TrajectoryRecord, directory: Path | str) -> Path:
    """Where ``write_trajectory`` puts a record: ``<directory>/<task>/<YYYYmmdd-HHMMSS>-<id[:12]>.json``."""
    stamp = record.started_at.strftime("%Y%m%d-%H%M%S")
    return Path(directory) / record.task / f"{stamp}-{record.id[:12]}.json"


def write_trajectory(record: TrajectoryRecord, directory: Path | str) -> Path:
    """Write the record atomically: a reader sees the old file or the whole new one, never a part."""
    path = trajectory_path(record, directory)
    data = _serialise(record, path)  # any failure here happens before a file exists
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o644)  # mkstemp makes 0600; the viewer may run as another user
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)  # make the rename itself durable
    return path


def _serialise(record: TrajectoryRecord, path: Path) -> bytes:
    try:
        data = record.model_dump(mode="json", warnings=False)
        # Fields may have been assigned after construction, unvalidated: what we write must load again.
        TrajectoryRecord.model_validate(data)
    except ValidationError as exc:
        raise TrajectoryError(f"{path}: the record cannot be written: {_describe(exc)}") from None
    except PydanticSerializationError as exc:
        raise TrajectoryError(f"{path}: the record cannot be written: {exc}") from exc
    text = json.dumps(data, ensure_ascii=False, indent=1, allow_nan=True)
    # A lone surrogate (undecodable output) becomes '?' instead of making the whole record unwritable.
    return text.encode("utf-8", errors="replace")


def _fsync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every filesystem lets a folder be opened and synced
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


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


def _read_bytes(path: Path) -> bytes:
    raw = path.read_bytes()
    if not raw.strip():
        raise TrajectoryError(f"{path}: the file is empty")
    return raw


def _parse(model: type[BaseModel], raw: bytes, path: Path) -> Any:
    try:
        return model.model_validate_json(raw)
    except ValidationError as exc:
        raise TrajectoryError(f"{path}: {_describe(exc)}") from None


def _describe(exc: ValidationError, limit: int = 5) -> str:
    """Pydantic's errors as 'turns[2].index: Input should be a valid integer; ...'."""
    parts = []
    for error in exc.errors()[:limit]:
        if error["type"] == "json_invalid":
            parts.append(f"invalid JSON: {error.get('ctx', {}).get('error', error['msg'])}")
            continue
        where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error["loc"]).lstrip(".")
        what = "missing field" if error["type"] == "missing" else error["msg"]
        parts.append(f"{where or 'top level'}: {what}")
    more = exc.error_count() - limit
    return "; ".join(parts) + (f"; and {more} more" if more > 0 else "")


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
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        found += [
            here / name
            for name in filenames
            if name.endswith(".json") and not name.startswith(".") and name not in _NOT_OURS
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


def recorded_evaluations(record: TrajectoryRecord) -> list[TurnEvaluation]:
    """Turn evaluations in order, then the final one unless it is the submit's, recorded twice."""
    evaluations = [t.evaluation for t in record.turns if t.evaluation is not None]
    final = record.final_evaluation
    if final is not None and not (evaluations and evaluations[-1].model_dump_json() == final.model_dump_json()):
        evaluations.append(final)
    return evaluations


def recorded_scores(source: Path | str | TrajectoryRecord) -> list[float | None]:
    """The primary score of each evaluation, in order (to compare a replay against the recording)."""
    record = source if isinstance(source, TrajectoryRecord) else load_trajectory(source)
    return [e.score for e in recorded_evaluations(record)]


def summary_metrics(record: TrajectoryRecord) -> dict[str, float]:
    """Counts and scores any record can report: turns, validates, timeouts, baseline/best/final score."""
    metrics: dict[str, float] = {
        "turns": len(record.turns),
        "validates": sum(1 for t in record.turns if t.evaluation is not None and t.evaluation.kind == "validate"),
        "format_errors": sum(1 for t in record.turns if t.format_error is not None),
        "timeouts": sum(1 for t in record.turns if t.timed_out),
        "command_time_s": sum(t.duration_s for t in record.turns),
    }
    baseline = record.baseline.score
    scores = [e.score for e in recorded_evaluations(record) if e.score is not None and not math.isnan(e.score)]
    if baseline is not None:
        metrics["baseline_score"] = baseline
    if scores:
        metrics["best_score"] = max(scores) if record.baseline.higher_is_better else min(scores)
    final = record.final_evaluation.score if record.final_evaluation else None
    if final is not None:
        metrics["final_score"] = final
        if baseline is not None:  # positive = better than the baseline, whichever way the metric goes
            metrics["improvement"] = (final - baseline) if record.baseline.higher_is_better else (baseline - final)
    return metrics


# --- MLGym's format ----------------------------------------------------------------------------

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
