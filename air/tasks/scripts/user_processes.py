"""Every process of one user in the container: listed from /proc, killed (runs as root; stdlib only)."""

from __future__ import annotations

import os
import signal
import time


def _processes_of(uid: int) -> list[tuple[int, int]]:
    """(pid, start time in clock ticks) of every live process of ``uid``."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            state, start = state_and_start(entry)
            if state in ("Z", "X"):
                continue  # dead already, waiting to be reaped
        except (OSError, ValueError, IndexError):
            continue
        found.append((int(entry), start))
    return found


def state_and_start(pid: str) -> tuple[str, int]:
    """A process's state letter and start time in clock ticks, from /proc/PID/stat (after the name)."""
    fields = open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()
    return fields[0], int(fields[19])


def kill_all(uid: int, started_after: int | None = None) -> None:
    """SIGKILL every process of ``uid`` (only those started after the tick, when given), until none is left."""
    for _ in range(50):
        victims = [pid for pid, start in _processes_of(uid) if started_after is None or start >= started_after]
        if not victims:
            return
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
