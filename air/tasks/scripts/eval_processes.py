"""The processes of an evaluation, seen from its runner (runs as root in the sandbox; stdlib only): pipes
drained with bounded memory, the limits a child starts under, the CPUs each gets, and the files a user
left where another could find them."""

from __future__ import annotations

import os
import random
import resource
import shutil
import stat
import threading

LEFTOVER_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue", "/run/lock", "/home")


class Drain(threading.Thread):
    """Reads a pipe to its end, keeping the head or the tail (a 1 GB output costs no memory or disk)."""

    def __init__(self, fd: int, keep: int, tail: bool) -> None:
        super().__init__(daemon=True)
        self.fd, self.keep, self.tail = fd, keep, tail
        self.data = bytearray()
        self.dropped = 0

    def run(self) -> None:
        while chunk := os.read(self.fd, 1 << 16):
            self.data += chunk
            if len(self.data) > self.keep:
                over = len(self.data) - self.keep
                self.dropped += over
                if self.tail:
                    del self.data[:over]
                else:
                    del self.data[self.keep :]
        os.close(self.fd)


def limits(memory: int | None, processes: int, cpus: set[int] | None = None, file_size: int = 0):
    """What a child starts under: address space, processes, no core dumps, its CPUs, and the largest file it
    may write (``file_size``, the agent's shell's own cap: 0 for none)."""

    def apply() -> None:
        if file_size:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size, file_size))
        if memory:
            resource.setrlimit(resource.RLIMIT_AS, (memory, memory))
        resource.setrlimit(resource.RLIMIT_NPROC, (processes, processes))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if cpus:
            os.sched_setaffinity(0, cpus)

    return apply


def split_cpus() -> tuple[set[int] | None, set[int] | None]:
    """(the evaluator's CPUs, the worker's): one of ours, at random, for the worker, the rest for the
    evaluator. Left to itself the scheduler often queues a woken process on its waker's CPU, where it
    waits out the waker's spin: a quarter of a millisecond per call instead of a few microseconds."""
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return None, None
    worker = random.choice(cpus)
    return set(cpus) - {worker}, {worker}


def oom_first(pid: int) -> None:
    """Make the process the OOM killer's first choice (a memory bomb must not take the evaluator)."""
    try:
        with open(f"/proc/{pid}/oom_score_adj", "w") as f:
            f.write("1000")
    except OSError:
        pass


def _owned_by(uid: int):
    """(path, lstat) of everything under LEFTOVER_DIRS that ``uid`` owns, deepest first."""
    for top in LEFTOVER_DIRS:
        for dirpath, dirnames, filenames in os.walk(top, topdown=False):
            for name in filenames + dirnames:
                path = os.path.join(dirpath, name)
                try:
                    st = os.lstat(path)
                except OSError:
                    continue
                if st.st_uid == uid:
                    yield path, st


def remove_leftovers(uid: int) -> None:
    """Files the evaluator's user created where others could find them later (a channel to the agent)."""
    for path, st in _owned_by(uid):
        try:
            shutil.rmtree(path) if stat.S_ISDIR(st.st_mode) else os.unlink(path)
        except OSError:
            pass


def close_shared_writes(uid: int) -> None:
    """Model tasks run the agent's code as the evaluator: files and folders the agent made writable by
    others would let it leave what it read for the agent to find. Take that write permission away."""
    for path, st in _owned_by(uid):
        if st.st_mode & 0o002 and not stat.S_ISLNK(st.st_mode):
            try:
                os.chmod(path, st.st_mode & ~0o002)
            except OSError:
                pass
