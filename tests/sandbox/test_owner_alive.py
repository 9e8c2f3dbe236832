"""Whether a container's owner still lives: judged from its pid and start time, never from a clock's rounding."""

from __future__ import annotations

import os
import subprocess
import sys

import psutil

from air.sandbox.config import LABEL_PID, LABEL_STARTED
from air.sandbox.removal import owner_alive


def _labels(pid: int, started: float) -> dict[str, str]:
    return {LABEL_PID: str(pid), LABEL_STARTED: f"{started:.3f}"}


def test_a_live_owner_is_alive_even_when_boot_time_moved_by_a_second() -> None:
    # psutil's create_time = btime (whole seconds, wall clock) + ticks: an NTP slew moves it by exactly 1 s.
    started = psutil.Process(os.getpid()).create_time()
    assert owner_alive(_labels(os.getpid(), started))
    assert owner_alive(_labels(os.getpid(), started - 1.0))
    assert owner_alive(_labels(os.getpid(), started + 1.0))


def test_a_dead_owner_or_a_reused_pid_is_not() -> None:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    started = psutil.Process(child.pid).create_time()
    child.wait()
    assert not owner_alive(_labels(child.pid, started))
    assert not owner_alive(_labels(os.getpid(), psutil.Process(os.getpid()).create_time() - 60))
    assert not owner_alive({LABEL_PID: "not a pid"})
