"""Stop and resume every process of the agent around an evaluation (runs as root in the sandbox; stdlib only).

kill(-1, SIGSTOP) sent *as the agent* reaches all of the agent's processes in one system call, forks in
flight included; root's kill(-1) would stop root's too. The sender is a fork of this (root's) process that
changes its user ids and signals, and never executes a program: a program started as the agent (``setpriv
kill``, as before) was the agent's to trace, and it held root's output and environment. The fork:

- closes every descriptor first: nothing of root's exec is open in it;
- takes real and effective uid = the agent (kill(-1) then reaches exactly the agent's processes: kill's
  permission is the sender's real or effective uid against the target's real or saved one), keeps saved
  uid and every gid root's: ptrace demands all of them equal the tracer's, and /proc/PID/{environ,fd,mem}
  demand ptrace's permission, so no process of the agent can read, trace or write it;
- is non-dumpable besides (the kernel makes it so on the uid change), though the saved uid alone refuses ptrace.

The agent may still signal it (same real uid): a stopped or vanished sender is waited for a bounded time and
then killed; the freeze then looks again, and gives up (no score) after its deadline, never hanging.
"""

from __future__ import annotations

import os
import signal
import time

try:  # imported from the package (tests), or run beside it in the container
    from . import proc_table
except ImportError:
    import proc_table  # type: ignore[no-redef]

SENDER_WAIT_S = 2.0  # a sender runs for microseconds; one the agent stopped is killed after this
FREEZE_DEADLINE_S = 10.0  # then no evaluation: the agent kept a process running
RESEND_S = 0.05
LOOK_AGAIN_S = 0.002


def running_processes(uid: int) -> list[int]:
    """The processes of ``uid`` (real uid) not in a group stop: a thread running, traced, or unreadable."""
    return [p.pid for p in proc_table.of_user(uid) if not p.stopped]


def traced_processes(uid: int) -> list[int]:
    """The processes of ``uid`` with a traced thread: its tracer can hold back SIGSTOP (a pair of processes
    tracing each other ran through every freeze), so these are killed instead."""
    return [p.pid for p in proc_table.of_user(uid) if p.traced]


def _send(signum: int, pids: tuple[int, ...] = ()) -> None:
    for target in pids or (-1,):
        try:
            os.kill(target, signum)
        except ProcessLookupError:
            pass  # gone meanwhile, or the agent has no process at all
        except PermissionError:
            pass  # not the agent's (a pid reused by another user's process): the kernel refused, as it should


def signal_all_as(uid: int, signum: int, pids: tuple[int, ...] = ()) -> bool:
    """kill(-1, ``signum``) (or kill of each of ``pids``) from a fork of this process holding nothing of
    root's: the kernel lets it reach only processes of ``uid``. True if it finished."""
    pid = os.fork()
    if pid == 0:  # the child: no Python-level work beyond system calls, then _exit
        code = 1
        try:
            os.closerange(0, 1 << 20)
            os.setresuid(uid, uid, 0)
            _send(signum, pids) if pids else _send(signum)
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + SENDER_WAIT_S
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status) == 0
        time.sleep(0.0005)
    os.kill(pid, signal.SIGKILL)  # stopped: it dies at once; held as a traced zombie: not waited for long
    reap_by = time.monotonic() + 0.5
    while time.monotonic() < reap_by and not os.waitpid(pid, os.WNOHANG)[0]:
        time.sleep(0.001)
    return False


def freeze(uid: int) -> list[int]:
    """Stop every process of ``uid``; [] when none runs, else those still running at the deadline. A signal
    takes effect when its process next runs (a few scheduler ticks under load): look again every few
    milliseconds, and send again every RESEND_S, for forks made since."""
    deadline = time.monotonic() + FREEZE_DEADLINE_S
    while True:
        signal_all_as(uid, signal.SIGSTOP)
        resend_at = time.monotonic() + RESEND_S
        while True:
            traced = traced_processes(uid)
            if traced:  # SIGKILL reaches a traced process whatever its tracer does
                signal_all_as(uid, signal.SIGKILL, tuple(traced))
            running = running_processes(uid)
            if not running or time.monotonic() > deadline:
                return running
            if time.monotonic() > resend_at:
                break
            time.sleep(LOOK_AGAIN_S)


def thaw(uid: int) -> None:
    signal_all_as(uid, signal.SIGCONT)


if __name__ == "__main__":  # `agent_freeze.py thaw USER`: the host's recovery after a runner it had to cut
    import pwd
    import sys

    if sys.argv[1:2] == ["thaw"] and len(sys.argv) == 3:
        thaw(pwd.getpwnam(sys.argv[2]).pw_uid)
    else:
        sys.exit("usage: agent_freeze.py thaw USER")
