"""Per-user kernel counters between rollouts (issue 62, cause 4): each container's agent has a uid of its own.

The kernel counts inotify instances (and epoll watches, POSIX message queue bytes, queued signals) per uid of the
host. When every container's agent was uid 1000, what rollout A held, rollout B (and the host's own uid 1000)
could not take, and the count was a channel between them. Now each agent takes ``UID_BASE`` plus its container's
init pid at the first shell start (air/sandbox/agent_uid.py). Under an engine's ``userns-remap`` the namespace's
range has no room for it: the image's uid is kept, and the counters still cross; the last test shows that.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from air.sandbox.agent_uid import UID_BASE
from air.sandbox.config import SandboxConfig
from air.sandbox.container import Sandbox
from rigs.patience import backstop
from tests.mlgym_image import standin_image
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
SCRIPT = "python3 ~/hold.py"


def limit() -> int:
    return int(Path("/proc/sys/fs/inotify/max_user_instances").read_text())


@pytest.fixture(params=["ours", "mlgym-layout"])
def layout_config(request: pytest.FixtureRequest, docker_image: str) -> SandboxConfig:
    """Our image, and one laid out like MLGym's (its agent's conda env in its home, no system python3)."""
    image = docker_image if request.param == "ours" else standin_image(docker_image)
    return SandboxConfig(image=image, run_id="pytest", cpus=1.0, memory="1g", tmp_size="512m")


async def _took(sandbox: Sandbox, command: str) -> int:
    result = await sandbox.run(command, timeout=60)
    found = re.search(r"took (\d+)", result.output)
    assert found, result.output
    return int(found[1])


async def _both(config: SandboxConfig, client=None) -> tuple[Sandbox, Sandbox]:
    a = await Sandbox.create(config, client)
    try:
        b = await Sandbox.create(config, client)
    except BaseException:
        await a.destroy()
        raise
    for sandbox in (a, b):
        await sandbox.run(heredoc("~/hold.py", HOLD), timeout=30)
    return a, b


async def _a_holds_b_takes(a: Sandbox, b: Sandbox) -> tuple[int, int]:
    """A takes three quarters of the limit and holds them; then how many B can take."""
    most = limit()
    held = await _took(a, f"({SCRIPT} {most * 3 // 4} 60 > ~/held.txt 2>&1 &); sleep 2; cat ~/held.txt")
    return held, await _took(b, f"{SCRIPT} {most} 0")


async def test_each_container_has_an_agent_uid_no_host_user_has(layout_config: SandboxConfig) -> None:
    a, b = await _both(layout_config)
    try:
        uids = []
        for sandbox in (a, b):
            shown = (await sandbox.run("id -u; id -un; stat -c %u ~ ~/workspace; touch ~/mine && echo wrote")).output
            uid = sandbox.shell.agent_uid
            assert uid is not None and uid >= UID_BASE
            assert shown.split() == [str(uid), "agent", str(uid), str(uid), "wrote"], shown
            with pytest.raises(KeyError):
                pwd.getpwuid(uid)  # no host user has it
            uids.append(uid)
        assert uids[0] != uids[1]
        # No limit is lowered for all from inside, not even by root: the engine mounts /proc/sys read-only.
        code, said = await a.exec_root(["sh", "-c", "echo 1 > /proc/sys/fs/inotify/max_user_instances"])
        assert code != 0 and "Read-only" in said, said
        # A new shell (the agent killed its own) keeps the container's uid; root's kill finds the agent by name.
        await a.run("kill -9 $$")
        assert (await a.run("id -u")).output.split() == [str(uids[0])]
    finally:
        for sandbox in (a, b):
            await sandbox.destroy()


async def test_inotify_instances_one_rollout_holds_leave_anothers_count_alone(layout_config: SandboxConfig) -> None:
    a, b = await _both(layout_config)
    try:
        held, got = await _a_holds_b_takes(a, b)
        most = limit()
        assert held > most // 2  # (a count no other uid shares: all three quarters)
        assert got == most, f"A holds {held} inotify instances; B, another rollout, got only {got} of {most}"
    finally:
        for sandbox in (a, b):
            with contextlib.suppress(Exception):
                await sandbox.destroy()


SYSTEM_PYTHON = shutil.which("python3", path="/usr/bin:/bin")  # one that uid 1000 may run (not root's venv)


@pytest.mark.skipif(os.geteuid() != 0, reason="a process of the host's uid 1000 is started by root")
@pytest.mark.skipif(SYSTEM_PYTHON is None, reason="the host's uid 1000 runs the system's python3: none here")
async def test_the_host_uid_1000_holding_its_instances_leaves_the_agents_alone(sandbox_config: SandboxConfig) -> None:
    """A process of the host's uid 1000 takes every instance it can, then the agent takes the full limit: the two
    counts are apart. (A copy of this test running beside it may hold some of uid 1000's: together the two hold
    at most the limit, and the host's side waits until it holds any.)"""
    most = limit()
    host, held = await asyncio.to_thread(_host_uid_1000_holds, most)
    sandbox = None
    try:
        sandbox = await Sandbox.create(sandbox_config)
        await sandbox.run(heredoc("~/hold.py", HOLD), timeout=30)
        got = await _took(sandbox, f"{SCRIPT} {most} 0")
        assert held + got > most and got == most, f"uid 1000 on the host holds {held}; the agent got {got} of {most}"
    finally:
        host.kill()
        host.wait()
        if sandbox is not None:
            await sandbox.destroy()


def _host_uid_1000_holds(most: int) -> tuple[subprocess.Popen, int]:
    """A holder of the host's uid 1000 with at least one instance, and how many it holds."""
    deadline = time.monotonic() + backstop(60)
    while True:
        host = subprocess.Popen(
            [SYSTEM_PYTHON, "-I", "-c", HOLD, str(most), str(backstop(60))],
            user=1000,
            stdout=subprocess.PIPE,
            cwd="/",
            text=True,
        )
        held = int(host.stdout.readline().split()[1])
        if held or time.monotonic() > deadline:
            return host, held
        host.kill()
        host.wait()
        time.sleep(0.5)


async def test_under_userns_remap_the_image_uid_is_kept_and_counts_cross(remapping_engine) -> None:
    """What holds on an engine that remaps users: the container's user namespace has 65,536 uids, so the agent
    keeps the image's (1000, the host's 101000 or so: never a host user's), and two containers' agents share it."""
    config = SandboxConfig(
        image=remapping_engine.image, run_id="pytest", cpus=1.0, memory="1g", tmp_size="512m", network=False
    )
    client = remapping_engine.client()
    a, b = await _both(config, client)
    try:
        inside = (await a.run("id -u; cat /proc/self/uid_map")).output.split()
        assert inside[0] == "1000" and inside[1:3] != ["0", "0"], inside  # remapped, the image's uid kept
        held, got = await _a_holds_b_takes(a, b)
        assert held + got <= limit(), (held, got)  # one count for both: the cause stands on such an engine
    finally:
        for sandbox in (a, b):
            with contextlib.suppress(Exception):
                await sandbox.destroy()
        client.close()
