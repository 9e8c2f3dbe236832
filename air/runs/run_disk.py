"""The disk under a run's folder: checked before the run starts (writable, room left), a line of
``steps.jsonl`` appended whole or not at all, and a write the disk refused said once, naming the folder.

A read-only mount or a full disk is known before any container starts; one that fills during the run
stops it at the next write of its own files (the trajectories are written atomically by the env, the
summary by ``interruption.write_json_atomically``), and what the folder holds stays readable.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

from air.runs.run_folder import RunFolder, RunFolderError

# Below this a run cannot keep its first step's files (a trajectory of a long episode is ~100 KB).
MIN_FREE_BYTES = 5 * 2**20
# The errors that are the disk's, not the run's: full, over quota, read-only, failing.
DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EIO})
_PROBE = ".air-write-test"
FIX = "free space there, or choose an --output-dir on another disk"


class RunDiskError(RunFolderError):
    """The run's folder cannot hold a run: the message names it, why, and the fix."""


def claim_checked(claim: Callable[[], RunFolder], requested: str | None) -> RunFolder:
    """``claim()`` (``StandaloneSettings.open_run_folder``), then ``probe_folder`` on what it claimed:
    a folder the disk refuses is an error naming it, never a traceback, and is given back."""
    try:
        folder = claim()
    except OSError as exc:  # mkdir or the claim file on a read-only or full disk
        # The folder asked for (the failed file may be one inside it); else where the default would go.
        where = Path(requested).expanduser().resolve() if requested else exc.filename
        raise RunDiskError(
            f"output folder {where} cannot be written: {exc.strerror or exc}; choose an --output-dir on a writable disk"
        ) from None
    try:
        probe_folder(folder.path)
    except RunDiskError:
        folder.discard()
        raise
    return folder


def probe_folder(path: Path, min_free: int | None = None) -> None:
    """Write, fsync and remove a small file in ``path``, then ask the disk how much room is left."""
    min_free = MIN_FREE_BYTES if min_free is None else min_free
    probe = path / f"{_PROBE}-{os.getpid()}"
    try:
        fd = os.open(probe, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        try:
            os.write(fd, b"\0" * 4096)
            os.fsync(fd)
        finally:
            os.close(fd)
            probe.unlink(missing_ok=True)
    except OSError as exc:
        raise RunDiskError(
            f"output folder {path} cannot be written: {exc.strerror or exc}; choose an --output-dir on a writable disk"
        ) from None
    free = shutil.disk_usage(path).free
    if free < min_free:
        raise RunDiskError(
            f"output folder {path} has {_size(free)} free on its disk, less than the {_size(min_free)} a run "
            f"needs; {FIX}"
        )


class WholeLines:
    """A file of lines, each appended whole or not at all: a write the disk cuts short is taken back."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)

    def append(self, line: str) -> None:
        data = (line.rstrip("\n") + "\n").encode()
        start = os.lseek(self._fd, 0, os.SEEK_END)
        try:
            written = 0
            while written < len(data):
                written += os.write(self._fd, data[written:])
        except OSError as exc:
            os.ftruncate(self._fd, start)  # shrinking needs no room: the file ends at its last whole line
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None  # the same error, with its file

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> WholeLines:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()


def disk_fault(exc: BaseException) -> OSError | None:
    """The first write the disk refused behind ``exc`` (its context and causes), if that is what it is."""
    found, seen = None, set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, OSError) and current.errno in DISK_ERRNOS:
            found = current  # keep walking: the earliest one is the cause, later ones its echoes
        # As Python shows a chain: the cause, else the context unless ``from None`` left it out.
        current = current.__cause__ or (None if current.__suppress_context__ else current.__context__)
    return found


def stopped_by_disk(folder: Path, fault: OSError, steps_wanted: int) -> str:
    """One line for a run the disk stopped: where, why, how far it got, and that what it kept is whole."""
    where = f", writing {fault.filename}" if fault.filename else ""
    steps = folder / "steps.jsonl"
    try:
        done = len(steps.read_text().splitlines()) if steps.is_file() else 0
    except OSError:
        done = 0
    kept = sorted(p.name + ("/" if p.is_dir() else "") for p in folder.iterdir()) if folder.is_dir() else []
    if not kept:
        holds = "it kept nothing"
    else:
        holds = f"what it keeps there is whole: {', '.join(kept)}"
        if "summary.json" not in kept:
            holds += " (no summary.json: it did not fit)"
    return (
        f"the disk under {folder} refused a write ({fault.strerror}{where}); the run stopped after {done} of "
        f"{steps_wanted} steps, and {holds}; {FIX}"
    )


def _size(n: int) -> str:
    return f"{n} bytes" if n < 2**20 else f"{n / 2**20:.1f} MB"
