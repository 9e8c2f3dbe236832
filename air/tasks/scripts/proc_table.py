"""The container's processes as /proc shows them, read as bytes (runs as root in the sandbox; stdlib only).

A process's name is its own to choose (``prctl(PR_SET_NAME)``: any bytes but NUL, a ``)`` or a newline
included). Read as text, a name that is not UTF-8 made the read raise, which was taken for "gone", so such a
process was never seen: it ran through the freeze and survived every clean-up. Here:

- every file is read as bytes, and /proc/PID/stat's fields are found after the *last* ``)``;
- the owner is the real uid from /proc/PID/status (the folder's owner follows the effective uid, and root's
  when the process made itself non-dumpable);
- a process whose files cannot be read while its folder is still there is ``UNREADABLE``: the callers count
  it as running and as anyone's (unseen never means stopped);
- a thread traced by another process (``TracerPid``, or the ``t`` state) is reported as such: its tracer can
  swallow SIGSTOP, so the freeze ends it instead (SIGKILL is never held back by a tracer).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

UNREADABLE = -1  # a uid or start time that could not be read


@dataclass(frozen=True)
class Process:
    pid: int
    uid: int  # real uid, or UNREADABLE
    start: int  # start time in clock ticks since boot, or UNREADABLE
    states: bytes  # one state letter per thread (b"?" for a thread that could not be read)
    traced: bool  # some thread has a tracer

    @property
    def dead(self) -> bool:
        """Exited, waiting to be reaped: it runs nothing and holds only a pid."""
        return bool(self.states) and all(s in b"ZX" for s in self.states)

    @property
    def stopped(self) -> bool:
        """Every thread in a group stop (``T``), untraced: it stays so until someone sends SIGCONT."""
        return not self.traced and bool(self.states) and all(s in b"TZX" for s in self.states)


def _read(path: str) -> bytes:
    with open(path, "rb") as f:
        return f.read()


def field(status: bytes, key: bytes) -> bytes:
    """The first word of ``key:`` in a /proc status file, b"" when absent."""
    for line in status.split(b"\n"):
        if line.startswith(key + b":"):
            words = line.split()
            return words[1] if len(words) > 1 else b""
    return b""


def start_ticks(pid: int | str) -> int:
    """A process's start time in clock ticks since boot (field 22 of /proc/PID/stat)."""
    return int(_read(f"/proc/{pid}/stat").rpartition(b")")[2].split()[19])


def _thread(pid: str, task: str) -> tuple[bytes, bool]:
    """(state letter, traced) of one thread; (b"?", False) when it cannot be read."""
    try:
        status = _read(f"/proc/{pid}/task/{task}/status")
    except OSError:
        return b"?", False
    state = field(status, b"State")[:1] or b"?"
    return state, state == b"t" or field(status, b"TracerPid") not in (b"0", b"")


def read_process(pid: str, only_uid: int | None = None) -> Process | None:
    """One process, or None when it is gone (or, given ``only_uid``, when it is readably someone else's)."""
    uid = start = UNREADABLE
    try:
        uid = int(field(_read(f"/proc/{pid}/status"), b"Uid"))
    except (OSError, ValueError):
        pass
    if only_uid is not None and uid not in (only_uid, UNREADABLE):
        return None
    try:
        start = start_ticks(pid)
    except (OSError, ValueError, IndexError):
        pass
    states, traced = b"", False
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        tasks = []
    for task in tasks:
        state, thread_traced = _thread(pid, task)
        states += state
        traced = traced or thread_traced
    if not os.path.exists(f"/proc/{pid}"):
        return None
    return Process(int(pid), uid, start, states or b"?", traced)


def processes(only_uid: int | None = None) -> list[Process]:
    """Every process in the container that is still there (given ``only_uid``: those of that real uid, and
    every one whose uid could not be read)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            process = read_process(entry, only_uid)
            if process is not None:
                found.append(process)
    return found


def of_user(uid: int) -> list[Process]:
    """The live processes of real uid ``uid``, and every one whose uid could not be read."""
    return [p for p in processes(uid) if not p.dead]
