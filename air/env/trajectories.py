"""One JSON record per rollout: the record, writing it safely, and what any record can report.

A rollout is saved as ``<dir>/<task>/<YYYYmmdd-HHMMSS>-<id[:12]>.json`` holding a
``TrajectoryRecord``. The viewer and the replay tool read those files and MLGym's run folders
(``<task>.traj`` + ``results.json``) through ``trajectory_reader.load_trajectory``. Every field, and how MLGym's
format maps onto it, is described in docs/trajectories.md.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import tempfile
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticSerializationError

if TYPE_CHECKING:
    from air.tasks.loader import Task

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
    status: str  # "ok" | "submission_not_found" | "evaluation_format_error" | "evaluation_failed" | "suspicious"
    score: float | None  # the primary metric's value
    metrics: dict[str, Any] | None
    error: str | None = None  # what the agent was told
    duration_s: float = 0.0
    kind: str = "validate"  # "validate" | "submit" | "final" (end-of-rollout evaluation)
    detail: str | None = None  # why a suspicious result was rejected (for people: the agent is not told)

    @classmethod
    def of(cls, evaluation: Any, kind: str) -> TurnEvaluation:
        """The record of one ``air.tasks.workspace.Evaluation``."""
        fields = ("status", "score", "metrics", "error", "duration_s", "detail")
        return cls(kind=kind, **{name: getattr(evaluation, name) for name in fields})


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

    @classmethod
    def of(cls, task: Task) -> BaselineInfo:
        """The baseline a task ships, as recorded beside its rollouts."""
        return cls(
            metric=task.primary_metric,
            score=task.baseline_score,
            higher_is_better=task.higher_is_better,
            metrics=task.baseline,
        )


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
    error: str | None = None  # one line: why the rollout was masked
    error_chain: list[str] = Field(default_factory=list)  # the exceptions behind it, outermost first
    baseline: BaselineInfo
    final_evaluation: TurnEvaluation | None = None
    evaluation_seed: int | None = None  # the evaluators' seed (env.seeds); air replay evaluates under it
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
    write_atomically(path, data)
    return path


def write_atomically(path: Path, data: bytes) -> None:
    """``path`` holds the old file or the whole new one, also when Ctrl-C or a full disk stops the write."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as handle:
            os.fchmod(handle.fileno(), 0o644)  # mkstemp makes 0600; the viewer may run as another user
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    _fsync_folder(path.parent)  # make the rename itself durable


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


def recorded_evaluations(record: TrajectoryRecord) -> list[TurnEvaluation]:
    """Turn evaluations in order, then the final one unless it is the submit's, recorded twice."""
    evaluations = [t.evaluation for t in record.turns if t.evaluation is not None]
    final = record.final_evaluation
    if final is not None and not (evaluations and evaluations[-1].model_dump_json() == final.model_dump_json()):
        evaluations.append(final)
    return evaluations


def summary_metrics(record: TrajectoryRecord) -> dict[str, float]:
    """Counts and scores any record can report: turns, validates, timeouts, baseline/best/final score."""
    metrics: dict[str, float] = {
        "turns": len(record.turns),
        "validates": sum(1 for t in record.turns if t.evaluation is not None and t.evaluation.kind == "validate"),
        "format_errors": sum(1 for t in record.turns if t.format_error is not None),
        "timeouts": sum(1 for t in record.turns if t.timed_out),
        "suspicious_evaluations": sum(1 for e in recorded_evaluations(record) if e.status == "suspicious"),
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


def error_chain(error: BaseException | None, limit: int = 8) -> list[str]:
    """``Type: message`` for an exception and the ones that caused it, outermost first."""
    chain: list[str] = []
    seen: set[int] = set()
    while error is not None and id(error) not in seen and len(chain) < limit:
        seen.add(id(error))
        chain.append(f"{type(error).__name__}: {error}"[:2000])
        error = error.__cause__ or error.__context__  # also a context kept off verifiers' one-line log
    return chain


def error_line(error: object | None) -> str | None:
    """One line that names why a rollout was masked, even when the outermost exception has no message
    (verifiers' ``ModelError()`` wraps the client's error): the first message found down the chain, and
    the root cause when it is another one (``ConnectionRefusedError: ... ('127.0.0.1', 9)``)."""
    if error is None:
        return None
    if not isinstance(error, BaseException):
        return str(error).splitlines()[0][:500] if str(error).strip() else "unknown error"
    chain: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in chain and len(chain) < 16:
        chain.append(current)
        current = current.__cause__ or current.__context__
    if str(error).strip():
        return _first_line(str(error))
    described = [e for e in chain if str(e).strip()]
    if not described:
        return " <- ".join(type(e).__name__ for e in chain)
    first, root = described[0], described[-1]
    line = f"{type(error).__name__}: {type(first).__name__}: {_first_line(str(first))}"
    if root is not first:
        line += f" (cause: {type(root).__name__}: {_first_line(str(root))})"
    return line


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0][:500]
