"""What /tmp and /dev/shm may hold in memory (issue 50, item 3): a bound on their files, settings that leave no room
for a new shell refused at load, and the engine's figures that tell memory full of what no kill frees."""

from __future__ import annotations

import asyncio
import re

import pytest
from pydantic import ValidationError

from air.env.settings import MLGymEnvSettings, env_settings_problems
from air.sandbox.config import INODE_KERNEL_BYTES, SHELL_ROOM, SandboxConfig, size_bytes, tmpfs_inodes
from air.sandbox.container import Sandbox
from air.sandbox.memory_full import memory_full, memory_held_by_no_process
from air.sandbox.storage import storage_kwargs


def test_each_tmpfs_bounds_its_files_by_its_size():
    assert tmpfs_inodes(size_bytes("1g")) == 65536  # one file per 16 KiB
    assert tmpfs_inodes(size_bytes("256m")) == 16384
    assert tmpfs_inodes(size_bytes("1m")) == 4096  # the floor: pip's and torch's caches, sockets
    tmpfs = storage_kwargs(SandboxConfig(), None)["tmpfs"]
    assert tmpfs["/tmp"].endswith("size=1g,nr_inodes=65536"), tmpfs
    assert tmpfs["/dev/shm"].endswith("size=256m,nr_inodes=16384"), tmpfs


def test_tmp_and_shm_that_leave_no_room_below_the_memory_limit_are_refused_at_load():
    with pytest.raises(ValidationError) as refused:
        SandboxConfig(memory="1g")  # the default /tmp (1g) alone reaches the limit
    (error,) = refused.value.errors()
    said = error["msg"].removeprefix("Value error, ")
    assert said == (
        "tmp_size (1g) plus shm_size (256m), with the kernel memory of their files and room for a new shell and "
        "root's exec (64m), need 1584m of memory (1g): raise memory to 1584m or lower tmp_size to 552m"
    )
    SandboxConfig(memory="1g", tmp_size="552m")  # what it says fits, fits
    with pytest.raises(ValidationError, match="raise memory to 1586m"):
        SandboxConfig(memory="1584m", tmp_size="1g", shm_size="257m")
    SandboxConfig(memory="1584m")
    SandboxConfig()  # the defaults fit: 1g + 256m of 4g
    with pytest.raises(ValidationError, match=r"need \d+m of memory \(256m\): raise memory to \d+m \[type"):
        SandboxConfig(memory="256m", tmp_size="128m", shm_size="200m")  # no /tmp would fit: one fix named


def test_the_env_refuses_them_naming_its_own_keys_in_one_line():
    problems = env_settings_problems({"container_memory": "1g", "container_shm": "64m"})
    assert len(problems) == 1, problems
    message = problems[0][1]
    assert "\n" not in message and "(got" not in message, message
    for key in ("container_tmp (1g)", "container_shm (64m)", "container_memory (1g)", "raise container_memory to"):
        assert key in message, message
    assert re.search(r"lower container_tmp to \d+m$", message), message
    assert env_settings_problems({"container_memory": "1g", "container_tmp": "512m"}) == []
    MLGymEnvSettings().sandbox_config()  # the env's defaults fit


def test_memory_held_by_no_process_is_what_neither_kill_nor_reclaim_frees():
    v1 = {  # the engine's figures on cgroup v1: 1 GiB of empty files' kernel memory and tmpfs pages
        "memory_stats": {
            "usage": (1 << 30) - (1 << 20),
            "limit": 1 << 30,
            "stats": {"total_rss": 1 << 20, "total_active_file": 0, "total_inactive_file": 2 << 20, "rss": 5},
        }
    }
    assert memory_held_by_no_process(v1) == ((1 << 30) - (4 << 20), 1 << 30)
    v2 = {"memory_stats": {"usage": 900 << 20, "limit": 1 << 30, "stats": {"anon": 700 << 20, "active_file": 0}}}
    assert memory_held_by_no_process(v2) == (200 << 20, 1 << 30)  # a process's memory: the OOM killer frees it
    assert memory_held_by_no_process({}) == (0, 0)  # an engine without figures: not full


def test_a_full_budget_still_leaves_room_for_a_shell():
    config = SandboxConfig(memory="1g", tmp_size="552m")
    held = sum(
        size_bytes(size) + tmpfs_inodes(size_bytes(size)) * INODE_KERNEL_BYTES
        for size in (config.tmp_size, config.shm_size)
    )
    assert size_bytes(config.memory) - held >= SHELL_ROOM


@pytest.mark.docker
async def test_a_real_container_mounts_them_bounded_and_is_full_only_when_its_memory_is(docker_image):
    config = SandboxConfig(image=docker_image, run_id="pytest", cpus=1.0, memory="1g", tmp_size="64m", shm_size="32m")
    sandbox = await Sandbox.create(config)
    try:
        code, mounts = await sandbox.exec_root(["cat", "/proc/self/mounts"])
        assert code == 0, mounts
        lines = [line for line in mounts.splitlines() if line.split()[1] in ("/tmp", "/dev/shm")]
        assert len(lines) == 2, lines  # the engine made no /dev/shm of its own beside ours
        for line in lines:
            assert "nr_inodes=4096" in line and "nosuid" in line and "nodev" in line, line
        code, made = await sandbox.exec_root(["su", "agent", "-s", "/bin/bash", "-c", "touch /dev/shm/x && echo ok"])
        assert made.strip().endswith("ok"), made
        said = await sandbox.run("cat /proc/self/oom_score_adj")
        assert said.output.strip() == "10", said  # the agent's processes go before root's keep-alive
        assert await asyncio.to_thread(memory_full, sandbox.container) is None  # plenty of room
        await asyncio.to_thread(sandbox.container.kill)
        assert await asyncio.to_thread(memory_full, sandbox.container) is None  # stopped: the host's, not full
    finally:
        await sandbox.destroy()
