"""`uv run rl` runs on this machine: the last one's folder, so that `air view` with no folder opens it, and the
host's prime-rl ports, held by one run at a time.

The folder is written when a run starts (``<state>/last-rl-run``, state as in
:func:`air.launch.process_records.state_dir`), so a run under way can be watched too; read by ``air view``.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from air.launch.process_records import state_dir

RECORD = "last-rl-run"


def remember_rl_run(folder: Path) -> None:
    path = state_dir() / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{folder.resolve()}\n")


def last_rl_run() -> Path | None:
    """The last run's folder, if one was recorded and is still there."""
    try:
        folder = Path((state_dir() / RECORD).read_text().strip())
    except OSError:
        return None
    return folder if folder.is_dir() else None


LOCK = "rl-host.lock"


class HostTaken(Exception):
    """Another `uv run rl` of this user runs on this host: prime-rl's fixed ports are its."""


@contextmanager
def hold_rl_host(config: Path) -> Iterator[None]:
    """This host's prime-rl ports for one run: a second `uv run rl` started meanwhile is refused at once, even before
    the first has bound them (its vLLM takes a minute to). The lock dies with this process (never inherited)."""
    path = state_dir() / LOCK
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise HostTaken(_holder(path)) from None
        os.ftruncate(fd, 0)
        os.write(fd, json.dumps({"pid": os.getpid(), "started": time.time(), "config": str(config)}).encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(path: Path) -> str:
    try:
        held = json.loads(path.read_text())
        pid, config = int(held["pid"]), held["config"]
        since = time.strftime("%H:%M:%S", time.localtime(float(held["started"])))
    except (OSError, ValueError, KeyError, TypeError):
        return f"another `uv run rl` holds this host's prime-rl ports ({path}): wait for it to end"
    return (
        f"another `uv run rl` (pid {pid}, since {since}, @ {config}) holds this host's prime-rl ports (vLLM's 8000 "
        f"among them): wait for it to end, or stop it with `kill {pid}`"
    )
