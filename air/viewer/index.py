"""An index of a trajectory folder: one small summary row per rollout, the files that could not
be read with their errors, and the full records loaded only when asked for.

The viewer keeps one ``TrajectoryIndex`` per folder. ``refresh`` walks the folder again and
re-reads only files that are new or changed (by modification time and size), so a folder that a
training run keeps writing into is cheap to reload; a file that disappeared leaves the index.
"""

from __future__ import annotations

import math
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from air.env.trajectories import TrajectoryError, TrajectoryRecord, recorded_evaluations, summary_metrics
from air.env.trajectory_reader import iter_trajectory_paths, load_trajectory
from air.viewer.rl_run import OwnFiles

Progress = Callable[[int, int], None]  # (files done, files to read)
T = TypeVar("T")


@dataclass(frozen=True)
class RolloutSummary:
    """One row of the overview: what filters, sorts and charts need, without the turns."""

    key: str  # the path relative to the folder: unique, stable across reloads
    path: str
    run: str  # the run it belongs to (see run_of): groups are per run, never pooled across runs
    source: str
    id: str
    task: str
    agent: str  # the policy's name when a scripted policy played, else the model's
    model: str | None
    step: int | None
    group_id: str | None
    exit_status: str
    reward: float | None
    advantage: float | None
    metric: str | None
    higher_is_better: bool
    baseline_score: float | None
    best_score: float | None
    final_score: float | None
    improvement: float | None  # final minus baseline, positive = better whichever way the metric goes
    turns: int
    validates: int
    evaluations: int  # validates, submits and the end-of-rollout evaluation
    format_errors: int
    suspicious_evaluations: int  # results outside the metric's range: forged, earned nothing
    timeouts: int
    duration_s: float | None
    started_at: datetime
    error: str | None
    last_score: float | None = None  # the last score an evaluation produced (the env's final_score); None: unscored

    def as_row(self) -> dict[str, object]:
        return asdict(self)


@dataclass(frozen=True)
class Problem:
    """A file or run folder that could not be read; listed, never fatal."""

    key: str
    path: str
    error: str


def agent_of(record: TrajectoryRecord) -> str:
    """Who played: the scripted policy's name when one did, else the model's."""
    return record.policy or record.model or "unknown"


def summarise(record: TrajectoryRecord, path: Path, root: Path) -> RolloutSummary:
    counts = summary_metrics(record)
    return RolloutSummary(
        key=_key(path, root),
        path=str(path),
        run=run_of(path, root),
        source=record.source,
        id=record.id,
        task=record.task,
        agent=agent_of(record),
        model=record.model,
        step=record.step,
        group_id=record.group_id,
        exit_status=record.exit_status,
        reward=_number(record.reward),
        advantage=_number(record.advantage),
        metric=record.baseline.metric,
        higher_is_better=record.baseline.higher_is_better,
        baseline_score=_number(counts.get("baseline_score")),
        best_score=_number(counts.get("best_score")),
        final_score=_number(counts.get("final_score")),
        improvement=_number(counts.get("improvement")),
        turns=int(counts["turns"]),
        validates=int(counts["validates"]),
        evaluations=len(recorded_evaluations(record)),
        format_errors=int(counts["format_errors"]),
        suspicious_evaluations=int(counts["suspicious_evaluations"]),
        timeouts=int(counts["timeouts"]),
        duration_s=_number(record.duration_s),
        started_at=record.started_at,
        error=record.error,
        last_score=_last_score(record),
    )


def _last_score(record: TrajectoryRecord) -> float | None:
    """What the env reports as a rollout's final score: the last evaluation that produced one (a failed or
    suspicious one does not), or None when none did (the rollout was not scored)."""
    scores = [e.score for e in recorded_evaluations(record) if e.status == "ok" and _number(e.score) is not None]
    return scores[-1] if scores else None


class TrajectoryIndex:
    """Summaries of every rollout under ``directory``; bodies are read on demand."""

    def __init__(self, directory: Path | str, body_cache_size: int = 64) -> None:
        self.directory = Path(directory).expanduser().resolve()
        self._entries: dict[str, tuple[tuple[int, int], RolloutSummary | Problem]] = {}
        self._bodies: OrderedDict[tuple[str, tuple[int, int]], TrajectoryRecord] = OrderedDict()
        self._body_cache_size = body_cache_size
        self._lock = threading.Lock()  # Streamlit serves each browser tab from its own thread
        self.version = 0  # bumped whenever a refresh changes what the index holds
        self.refreshed = False
        self._memo: OrderedDict[Any, tuple[int, Any]] = OrderedDict()

    @property
    def rollouts(self) -> list[RolloutSummary]:
        return [e for _, e in self._entries.values() if isinstance(e, RolloutSummary)]

    @property
    def problems(self) -> list[Problem]:
        return [e for _, e in self._entries.values() if isinstance(e, Problem)]

    def refresh(self, progress: Progress | None = None) -> TrajectoryIndex:
        """Walk the folder; read what is new or changed, forget what is gone."""
        with self._lock:
            self._refresh(progress)
        return self

    def _refresh(self, progress: Progress | None) -> None:
        own = OwnFiles(self.directory)  # a prime-rl run folder's configs and weights are JSON, not trajectories
        paths = [p for p in iter_trajectory_paths(self.directory) if not own(p)]  # FileNotFoundError names it
        seen: dict[str, tuple[tuple[int, int], RolloutSummary | Problem]] = {}
        for done, path in enumerate(paths, start=1):
            key = _key(path, self.directory)
            signature = _signature(path)
            cached = self._entries.get(key)
            if cached is not None and cached[0] == signature:
                seen[key] = cached
            else:
                seen[key] = (signature, self._read(path))
            if progress is not None and (done % 250 == 0 or done == len(paths)):
                progress(done, len(paths))
        if seen.keys() != self._entries.keys() or any(seen[k] is not self._entries[k] for k in seen):
            self.version += 1
        self._entries, self.refreshed = seen, True

    def memo(self, name: Any, build: Callable[[], T], size: int = 32) -> T:
        """``build()``, computed once per version of the index (tables derived from the rows)."""
        with self._lock:
            version = self.version  # the rows build() will see; a refresh meanwhile makes it stale
            hit = self._memo.get(name)
            if hit is not None and hit[0] == version:
                self._memo.move_to_end(name)
                return hit[1]
        value = build()
        with self._lock:
            self._memo[name] = (version, value)
            while len(self._memo) > size:
                self._memo.popitem(last=False)
        return value

    def summary(self, key: str) -> RolloutSummary:
        entry = self._entries.get(key)
        if entry is None or not isinstance(entry[1], RolloutSummary):
            raise KeyError(f"{key}: no such rollout in {self.directory}")
        return entry[1]

    def load(self, key: str) -> TrajectoryRecord:
        """The full record of one rollout (recently used ones are kept in memory). KeyError for a key
        the index does not hold; OSError / TrajectoryError when the file changed badly or vanished."""
        summary = self.summary(key)
        path = Path(summary.path)
        cache_key = (key, _signature(path))
        with self._lock:
            if cache_key in self._bodies:
                self._bodies.move_to_end(cache_key)
                return self._bodies[cache_key]
        record = load_trajectory(path)
        with self._lock:
            self._bodies[cache_key] = record
            while len(self._bodies) > self._body_cache_size:
                self._bodies.popitem(last=False)
        return record

    def search(self, query: str, keys: Iterable[str] | None = None, progress: Progress | None = None) -> set[str]:
        """Keys of the rollouts whose commands or outputs contain ``query`` (case-insensitive)."""
        needle = query.casefold()
        candidates = list(keys) if keys is not None else [r.key for r in self.rollouts]
        hits = set()
        for done, key in enumerate(candidates, start=1):
            try:  # read directly: a search must not push the rollouts being looked at out of the cache
                record = load_trajectory(self.summary(key).path)
            except (OSError, TrajectoryError, KeyError):
                continue  # vanished or broken since the last refresh: the next refresh lists it
            if any(needle in (t.command or "").casefold() or needle in t.output.casefold() for t in record.turns):
                hits.add(key)
            if progress is not None and (done % 250 == 0 or done == len(candidates)):
                progress(done, len(candidates))
        return hits

    def _read(self, path: Path) -> RolloutSummary | Problem:
        try:
            return summarise(load_trajectory(path), path, self.directory)
        except (TrajectoryError, ValidationError, OSError, UnicodeDecodeError, ValueError) as exc:
            message = str(exc) if isinstance(exc, TrajectoryError) else f"{path}: {type(exc).__name__}: {exc}"
            return Problem(key=_key(path, self.directory), path=str(path), error=message)


def run_of(path: Path, root: Path) -> str:
    """The run a trajectory belongs to: the folder holding the ``trajectories/`` folder it sits in
    (``air standalone``'s run folder, prime-rl's output folder), relative to the viewed folder; the
    viewed folder's own name when the file is not under such a folder inside it (a run folder or its
    ``trajectories/`` opened directly, MLGym runs). Two runs' group ``1-0`` are two groups."""
    try:
        parts = path.relative_to(root).parts[:-1]
    except ValueError:
        parts = ()
    if "trajectories" in parts:
        above = parts[: len(parts) - 1 - parts[::-1].index("trajectories")]
        if above:
            return "/".join(above)
    return root.parent.name if root.name == "trajectories" and root.parent.name else root.name or str(root)


def _key(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def _signature(path: Path) -> tuple[int, int]:
    """(newest modification time, total size); for an MLGym run folder, over the files in it."""
    try:
        if not path.is_dir():
            stat = path.stat()
            return stat.st_mtime_ns, stat.st_size
        newest, total = 0, 0
        with os.scandir(path) as entries:
            for entry in entries:
                if entry.is_file():
                    stat = entry.stat()
                    newest, total = max(newest, stat.st_mtime_ns), total + stat.st_size
        return newest, total
    except OSError:
        return 0, -1  # gone or unreadable: re-read, which reports it


def _number(value: float | None) -> float | None:
    """Scores may be NaN (a failed metric); the overview treats them as missing."""
    return None if value is None or (isinstance(value, float) and math.isnan(value)) else float(value)


_SHARED: dict[Path, TrajectoryIndex] = {}
_SHARED_LOCK = threading.Lock()


def shared_index(directory: Path | str) -> TrajectoryIndex:
    """One index per folder per process: every viewer session (and ``air view``'s warm-up) uses it."""
    path = Path(directory).expanduser().resolve()
    with _SHARED_LOCK:
        if path not in _SHARED:
            _SHARED[path] = TrajectoryIndex(path)
        return _SHARED[path]
