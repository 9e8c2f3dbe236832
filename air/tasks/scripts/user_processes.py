"""Every process of one user in the container: listed from /proc (as bytes: proc_table), killed (runs as
root in the sandbox; stdlib only).

The SIGKILL is sent by agent_freeze's sender, a fork that takes the user's uid first: the kernel lets it
reach only that user's processes, so a pid reused meanwhile by another user's process, or one whose uid
could not be read, is never root's to kill by mistake. Without a start time to spare from, one kill(-1)
reaches every process of the user at once, whatever its name, state or tracer."""

from __future__ import annotations

import signal
import time

try:  # imported from the package (tests), or run beside it in the container
    from . import proc_table
    from .agent_freeze import signal_all_as
except ImportError:
    import proc_table  # type: ignore[no-redef]
    from agent_freeze import signal_all_as  # type: ignore[no-redef]

ROUNDS = 50  # a killed process is gone within a scheduler tick or two; ~0.5 s at most before giving up


def state_and_start(pid: str) -> tuple[str, int]:
    """A process's state letter and start time in clock ticks, from /proc/PID/stat (after the name)."""
    fields = proc_table._read(f"/proc/{pid}/stat").rpartition(b")")[2].split()
    return fields[0].decode(), int(fields[19])


def kill_all(uid: int, started_after: int | None = None) -> bool:
    """SIGKILL every process of ``uid`` (only those started at or after the tick, when given; one whose start
    cannot be read too), until none is left. True when none is."""
    for _ in range(ROUNDS):
        victims = tuple(
            p.pid
            for p in proc_table.of_user(uid)
            if started_after is None or p.start == proc_table.UNREADABLE or p.start >= started_after
        )
        if not victims:
            return True
        signal_all_as(uid, signal.SIGKILL, () if started_after is None else victims)
        time.sleep(0.01)
    return False
