"""When spinning for the other side of the call channel pays (stdlib only; runs in the sandbox).

Spinning pays when the other process runs on its own core: the answer is seen within a microsecond of
being written, where a sleep costs a wake-up (20-500 us on a VM). It does not pay on an oversubscribed
host (many evaluations at once): there the spinner takes the CPU the other side needs. The sign of that
is the other process waiting for a CPU, which the kernel counts for every process (/proc/PID/schedstat,
second field: nanoseconds spent runnable but not running). A peer that is merely busy with its own work
(the evaluator importing numpy for a tenth of a second) is running, not waiting, and is no reason to
stop spinning. The channel (call_channel.Channel._await) decides; this module only measures.
"""

from __future__ import annotations

import os
import struct

_PID = struct.Struct("=I")


def _cpu_list_size(text: str) -> int:
    """How many CPUs a kernel CPU list names ("0-3,8,10-11" -> 7)."""
    count = 0
    for part in text.strip().split(","):
        low, _, high = part.partition("-")
        count += int(high or low) - int(low) + 1
    return count


def usable_cpus() -> float:
    """CPUs this process's container may use: its cgroup's CPU set (not this process's affinity, which
    the evaluation runner narrows on purpose), capped by a cgroup v2 or v1 CPU quota."""
    cpus = float(len(os.sched_getaffinity(0)))
    for cpuset in ("cpuset.cpus.effective", "cpuset/cpuset.effective_cpus"):
        try:
            with open(f"/sys/fs/cgroup/{cpuset}") as f:
                cpus = float(_cpu_list_size(f.read()))
            break
        except (OSError, ValueError):
            continue
    for quota_file, period_file in (("cpu.max", None), ("cpu/cpu.cfs_quota_us", "cpu/cpu.cfs_period_us")):
        try:
            with open(f"/sys/fs/cgroup/{quota_file}") as f:
                quota, *period = f.read().split()
            if period_file:
                with open(f"/sys/fs/cgroup/{period_file}") as f:
                    period = [f.read().strip()]
        except OSError:
            continue
        if quota.isdigit() and period and period[0].isdigit() and int(period[0]):
            cpus = min(cpus, int(quota) / int(period[0]))
        break
    return cpus


def spin_budget_s() -> float:
    """How long to spin before sleeping: 200 us with two or more CPUs for us, else 0."""
    return 200e-6 if usable_cpus() >= 2 else 0.0


class PeerWaits:
    """How long the peer process has waited for a CPU so far (ns), read from its schedstat.

    The peer's pid comes from the shared region (each side writes its own at ``pid_at``). Whatever the
    peer writes there only steers this side's spinning: a wrong pid means a wrong guess, never access
    to anything. 0 while the peer has not written its pid (it is starting: nothing to wait for);
    ``None`` when it cannot be known (/proc hidden, the peer gone)."""

    def __init__(self, region, pid_at: int) -> None:
        self._region, self._pid_at = region, pid_at
        self._fd: int | None = None
        self._failed = False

    def __call__(self) -> int | None:
        if self._fd is None:
            if self._failed:
                return None
            if not self._open():
                return None if self._failed else 0
        try:
            return int(os.pread(self._fd, 128, 0).split()[1])
        except (OSError, ValueError, IndexError):
            os.close(self._fd)
            self._fd, self._failed = None, True
            return None

    def _open(self) -> bool:
        pid = _PID.unpack_from(self._region, self._pid_at)[0]
        if not pid:
            return False  # the peer has not started yet: ask again next time
        try:
            self._fd = os.open(f"/proc/{pid}/schedstat", os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            self._failed = True
            return False
        return True


def write_pid(region, pid_at: int) -> None:
    _PID.pack_into(region, pid_at, os.getpid())
