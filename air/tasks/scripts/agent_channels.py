"""What could carry something from a model task's evaluator to the agent, closed (runs as root in the sandbox;
stdlib only).

In a model task the agent's own code runs as the evaluator (MLGym's scripts import it), next to the pristine
files and the evaluation's seed, while every process of the agent is frozen. A frozen process still receives:
a listening socket's backlog fills (loopback or an abstract unix socket), a FIFO it holds open keeps what is
written into it, a System V queue or segment it made writable by others keeps what is put there; after the thaw
the agent reads it. So before such an evaluation:

- every process of the agent holding a socket, a FIFO or a System V shared-memory mapping is killed (SIGKILL,
  sent as the agent: the kernel lets it reach nothing else);
- every System V object of the agent that grants others any access is removed;

and after it, every System V object the evaluator's user owns or created is removed (its files are removed by
``eval_processes.remove_leftovers``, its processes by ``user_processes.kill_all``).
"""

from __future__ import annotations

import ctypes
import os
import signal
import stat

try:  # imported from the package (tests), or run beside it in the container
    from . import proc_table
    from .agent_freeze import signal_all_as
except ImportError:
    import proc_table  # type: ignore[no-redef]
    from agent_freeze import signal_all_as  # type: ignore[no-redef]

IPC_RMID = 0
# /proc/sysvipc/<kind>: (the id's column, the perms' column, the owner's uid column, the creator's uid column)
_SYSVIPC = {"shm": (1, 2, 7, 9), "msg": (1, 2, 7, 9), "sem": (1, 2, 4, 6)}


def _holds_a_channel(pid: int) -> bool:
    """The process holds a socket or a FIFO among its descriptors, or maps System V shared memory."""
    fds = f"/proc/{pid}/fd"
    try:
        names = os.listdir(fds)
    except OSError:
        return True  # cannot look: count it (unseen never means harmless)
    for name in names:
        try:
            target = os.readlink(f"{fds}/{name}")
            if target.startswith("socket:"):
                return True
            # A FIFO opened by its name (an anonymous pipe reads "pipe:[...]": only its holders can reach it).
            if not target.startswith("pipe:") and stat.S_ISFIFO(os.stat(f"{fds}/{name}").st_mode):
                return True
        except OSError:
            continue  # closed meanwhile
    try:
        with open(f"/proc/{pid}/maps", "rb") as f:
            return b"/SYSV" in f.read()
    except OSError:
        return True


def _holders_seen_as(uid: int, gid: int) -> list[int] | None:
    """The pids of ``uid``'s processes holding a way in, listed by a fork that has become ``uid`` (and ``gid``)
    entirely: root in a container lacks CAP_SYS_PTRACE, so only the agent's own credentials open its processes'
    /proc/PID/fd. The fork holds nothing but its pipe, and nothing can trace it: every process of the agent is
    frozen, and it is made non-dumpable. None if it failed."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: system calls and /proc reads only, then _exit
        code = 1
        try:
            os.closerange(0, write_end)
            os.closerange(write_end + 1, 1 << 20)
            os.setgroups([])
            os.setresgid(gid, gid, gid)
            os.setresuid(uid, uid, uid)
            held = [p.pid for p in proc_table.of_user(uid) if _holds_a_channel(p.pid)]
            os.write(write_end, " ".join(map(str, held)).encode() + b"\n")
            code = 0
        finally:
            os._exit(code)
    os.close(write_end)
    data = b""
    while chunk := os.read(read_end, 1 << 16):
        data += chunk
    os.close(read_end)
    _, status = os.waitpid(pid, 0)
    if os.waitstatus_to_exitcode(status) != 0 or not data.endswith(b"\n"):
        return None
    return [int(word) for word in data.split()]


def end_channel_holders(uid: int, gid: int) -> list[int]:
    """Kill every process of ``uid`` that holds a way in (a socket, a FIFO opened by name, System V shared memory;
    all of them where they could not be listed); returns their pids. Anonymous pipes are left: only their holders
    can reach them (another user cannot open /proc/PID/fd/N)."""
    held = _holders_seen_as(uid, gid)
    victims = tuple(held if held is not None else (p.pid for p in proc_table.of_user(uid)))
    if victims:
        signal_all_as(uid, signal.SIGKILL, victims)
    return list(victims)


def _objects() -> list[tuple[str, int, int, int, int]]:
    """(kind, id, perms, owner uid, creator uid) of every System V IPC object in the container."""
    found = []
    for kind, (id_col, perms_col, uid_col, cuid_col) in _SYSVIPC.items():
        try:
            with open(f"/proc/sysvipc/{kind}", "rb") as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            cols = line.split()
            try:
                found.append(
                    (kind, int(cols[id_col]), int(cols[perms_col], 8), int(cols[uid_col]), int(cols[cuid_col]))
                )
            except (IndexError, ValueError):
                continue
    return found


def _remove(kind: str, ident: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if kind == "shm":
        libc.shmctl(ident, IPC_RMID, None)
    elif kind == "msg":
        libc.msgctl(ident, IPC_RMID, None)
    else:
        libc.semctl(ident, 0, IPC_RMID)


def remove_ipc(uid: int, *, shared_only: bool) -> int:
    """Remove the System V objects ``uid`` owns or created (``shared_only``: those granting others access);
    returns how many."""
    removed = 0
    for kind, ident, perms, owner, creator in _objects():
        if uid in (owner, creator) and (not shared_only or perms & 0o066):
            _remove(kind, ident)
            removed += 1
    return removed


def close_before_model_evaluation(uid: int, gid: int) -> None:
    """The agent's ways in, closed before its code runs as the evaluator."""
    end_channel_holders(uid, gid)
    remove_ipc(uid, shared_only=True)
