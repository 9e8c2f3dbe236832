"""Process trees we started, recorded on disk, so they can be stopped later without guessing.

prime-rl's ``rl`` launcher kills only its direct children when something fails, so vLLM workers
and torchrun ranks can outlive it and keep GPU memory. ``air train`` starts the launcher in a new
session and records its tree here: root pid + start time, session id, user, command, and every
descendant seen while it runs. ``air clean`` reads the records back.

Identity rules (why a process is "ours"):
- a pid counts only together with its create_time (pids are reused);
- only processes of the current user are ever returned or signalled;
- the session scan (which finds processes re-parented to init after their parent died) runs only
  for a session whose leader was the recorded root, and only while that session id has not been
  taken by a newer process;
- this process and its ancestors are never returned.

Records live in ``<state>/processes/<run_id>.json``; state is $AIR_STATE_DIR, else
$XDG_STATE_HOME/air, else ~/.local/state/air.
"""

from __future__ import annotations

import getpass
import os
import secrets
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psutil
from pydantic import BaseModel, ConfigDict, PrivateAttr, ValidationError


def state_dir(explicit: Path | str | None = None) -> Path:
    """Where air keeps per-user state: ``explicit``, $AIR_STATE_DIR, $XDG_STATE_HOME/air, ~/.local/state/air."""
    if explicit is not None:
        return Path(explicit)
    if os.environ.get("AIR_STATE_DIR"):
        return Path(os.environ["AIR_STATE_DIR"])
    if os.environ.get("XDG_STATE_HOME"):
        return Path(os.environ["XDG_STATE_HOME"]) / "air"
    return Path.home() / ".local" / "state" / "air"


def records_dir(explicit: Path | str | None = None) -> Path:
    return state_dir(explicit) / "processes"


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def new_run_id() -> str:
    """Sortable by time, unique enough for one user's runs."""
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


class ProcessEntry(BaseModel):
    """One process seen in a recorded tree."""

    model_config = ConfigDict(extra="forbid")

    pid: int
    create_time: float
    cmdline: list[str]
    first_seen: str


class ProcessRecord(BaseModel):
    """A process tree we started: enough to find exactly its processes again, and nothing else."""

    model_config = ConfigDict(extra="forbid")

    run_id: str
    kind: str
    root_pid: int
    root_create_time: float
    session_id: int
    uid: int
    user: str
    command: list[str]
    cwd: str
    started_at: str
    config: str | None = None
    members: list[ProcessEntry] = []
    finished_at: str | None = None
    exit_code: int | None = None

    _path: Path | None = PrivateAttr(default=None)

    @property
    def path(self) -> Path:
        """The file this record lives in."""
        return self._path if self._path is not None else records_dir() / f"{self.run_id}.json"


class StopOutcome(BaseModel):
    """What happened to one process we tried to stop."""

    pid: int
    command: str
    outcome: str  # "terminated" | "killed" | "already gone" | "failed: <reason>"


# Snapshots run on the launcher's thread and the main thread; one writer at a time per process.
_write_lock = threading.Lock()


def save(record: ProcessRecord) -> Path:
    """Write the record atomically (temporary file + rename), so a reader never sees half a file."""
    path = record.path
    with _write_lock:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "w") as handle:
                handle.write(record.model_dump_json(indent=2))
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
    return path


def forget(record: ProcessRecord) -> None:
    """Delete the record's file (quiet if it is already gone)."""
    record.path.unlink(missing_ok=True)


def record_launch(
    popen_pid: int,
    kind: str,
    command: list[str],
    cwd: Path | str,
    config: str | None = None,
    state_dir: Path | str | None = None,
) -> ProcessRecord:
    """Record a process we just started (it may already have exited but must not have been reaped)."""
    proc = psutil.Process(popen_pid)
    try:
        session_id = os.getsid(popen_pid)
    except OSError:  # started with start_new_session=True, the root leads its own session
        session_id = popen_pid
    record = ProcessRecord(
        run_id=new_run_id(),
        kind=kind,
        root_pid=popen_pid,
        root_create_time=proc.create_time(),
        session_id=session_id,
        uid=os.getuid(),
        user=getpass.getuser(),
        command=[str(part) for part in command],
        cwd=str(cwd),
        started_at=now_iso(),
        config=config,
    )
    record._path = records_dir(state_dir) / f"{record.run_id}.json"
    save(record)
    return record


def load_records(state_dir: Path | str | None = None) -> tuple[list[ProcessRecord], list[tuple[Path, str]]]:
    """All readable records (oldest first) and, separately, the files that could not be read, with why."""
    folder = records_dir(state_dir)
    records: list[ProcessRecord] = []
    problems: list[tuple[Path, str]] = []
    if not folder.is_dir():
        return records, problems
    for path in sorted(folder.glob("*.json")):
        try:
            record = ProcessRecord.model_validate_json(path.read_text())
        except (OSError, ValueError, ValidationError) as exc:
            problems.append((path, _short_error(exc)))
            continue
        record._path = path
        records.append(record)
    return records, problems


def _short_error(exc: Exception) -> str:
    if isinstance(exc, ValidationError):
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(file)"
        return f"{exc.error_count()} problem(s), first at {where}: {first['msg']}"
    return f"{type(exc).__name__}: {exc}"
