"""Per-user kernel counters between two rollouts (issue 62, cause 4), as they stand: NOT removed.

Every container's agent is uid 1000 of the host's user namespace, and the kernel counts inotify instances (and
epoll watches, POSIX message queue bytes, queued signals) per uid: what rollout A holds, rollout B (and the host's
own uid 1000) cannot take, and the count is a channel between them. The fix needs a uid per container or a user
namespace per container, which this engine (Docker 20.10: ``userns-remap`` is daemon-wide, one range for all)
does not give (docs/security.md, the container's layer). This test shows what holds today and is marked as an
expected failure, strictly: the day the counters stop crossing it passes, fails the suite, and the mark goes.
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

import pytest

from air.sandbox.config import SandboxConfig
from air.sandbox.container import Sandbox
from tests.red_team import heredoc

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

# Takes as many inotify instances as the kernel gives this uid (at most ``want``) and holds them.
HOLD = (
    "import ctypes, sys, time\n"
    "libc = ctypes.CDLL(None, use_errno=True)\n"
    "fds = []\n"
    "while len(fds) < int(sys.argv[1]):\n"
    "    fd = libc.inotify_init1(0)\n"
    "    if fd < 0:\n"
    "        break\n"
    "    fds.append(fd)\n"
    "print('took', len(fds), flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
)


def limit() -> int:
    return int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())


@pytest.mark.xfail(strict=True, reason="issue 62 cause 4: rollouts share uid 1000's per-user kernel counters")
async def test_inotify_instances_one_rollout_holds_leave_anothers_count_alone(sandbox_config: SandboxConfig):
    most = limit()
    a = await Sandbox.create(sandbox_config)
    b = await Sandbox.create(sandbox_config)
    try:
        script = "python3 ~/hold.py"
        for sandbox in (a, b):
            await sandbox.run(heredoc("~/hold.py", HOLD), timeout=30)
        share = most * 3 // 4  # not all: the host's own uid 1000 keeps some while the test runs
        held = await a.run(f"({script} {share} 60 > ~/held.txt 2>&1 &); sleep 2; cat ~/held.txt", timeout=60)
        taken = int(re.search(r"took (\d+)", held.output)[1])
        assert taken > most // 2, held.output  # (the host's uid 1000 may hold a few of its own)
        free = await b.run(f"{script} {most} 0", timeout=60)
        got = int(re.search(r"took (\d+)", free.output)[1])
        assert got >= most // 2, f"A holds {taken} inotify instances; B, another rollout, got only {got} of {most}"
    finally:
        for sandbox in (a, b):
            with contextlib.suppress(Exception):
                await sandbox.destroy()
