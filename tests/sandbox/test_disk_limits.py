"""What a container may write (issue 20, class 8): a disk quota where the engine's storage driver can size
containers, and /tmp and /dev/shm of their own size on every engine.

The quota needs an engine that can size containers: ``quota_engine`` is a second engine whose data root is a
btrfs file (CI has root and btrfs); this host's main engine (overlay2 on ext4) cannot, and says so once.
"""

from __future__ import annotations

import logging
import re

import pytest

from air.env.settings import MLGymEnvSettings
from air.sandbox.config import SandboxConfig, owner_labels
from air.sandbox.container import Sandbox, container_kwargs, reset_docker_client
from air.sandbox.storage import quota_refused_hint, storage_kwargs
from tests.red_team import check_rollout, run_attack
from tests.second_engine import SecondEngine


def test_the_quota_goes_only_to_engines_that_can_size_a_container():
    config = SandboxConfig(image="x", disk="3g", tmp_size="64m", shm_size="32m")
    for driver in ("btrfs", "zfs", "overlay2 on xfs"):
        assert storage_kwargs(config, driver)["storage_opt"] == {"size": "3g"}, driver
    for driver in ("overlay2 on extfs", "vfs", None):
        assert "storage_opt" not in storage_kwargs(config, driver), driver  # the engine would refuse to start it
    assert "storage_opt" not in storage_kwargs(config.model_copy(update={"disk": ""}), "btrfs")
    kwargs = container_kwargs(config, owner_labels("r"), "overlay2 on extfs")
    assert kwargs["tmpfs"] == {"/tmp": "rw,nosuid,nodev,mode=1777,size=64m"}
    assert kwargs["shm_size"] == "32m"


@pytest.mark.parametrize(
    ("engine_says", "hint"),
    [  # the engines' own words at create (overlay2 on ext4 or on xfs without pquota; btrfs below the image)
        ("--storage-opt is supported only for overlay over xfs with 'pquota' mount option", "cannot size containers"),
        ("Failed to limit qgroup for &{}: disk quota exceeded", "is below what this engine counts"),
        ("No such image: x", ""),
    ],
)
def test_a_refused_quota_gets_the_hint_for_its_cause(engine_says, hint):
    said = quota_refused_hint(RuntimeError(engine_says), SandboxConfig(disk="300m"))
    assert (hint in said) if hint else said == ""


@pytest.mark.parametrize("size", ["2.5g", "-1g", "lots", "4gb"])
def test_a_size_docker_and_tmpfs_would_not_read_is_refused_at_load(size):
    with pytest.raises(ValueError, match=rf"tmp_size must be a whole size like .*{re.escape(size)}"):
        SandboxConfig(tmp_size=size)
    with pytest.raises(ValueError, match=rf"container_disk must be a whole size like .*{re.escape(size)}"):
        MLGymEnvSettings(container_disk=size)


# dd's error (a tmpfs is full: ENOSPC; a btrfs quota: EDQUOT), then the megabytes it wrote.
FILL = "dd if=/dev/zero of={path} bs=1M count={mb} 2>&1 | grep -oE '{full}' | head -1; du -m {path} | cut -f1"
FULL = ("No space left on device", "Disk quota exceeded")


def filled(output: str, limit_mb: int) -> None:
    first, rest = output.split("\n", 1)
    assert first in FULL, output
    assert int(rest.split()[0]) <= limit_mb, output  # what was written stopped at the limit


@pytest.mark.docker
@pytest.mark.timeout(180)
async def test_tmp_and_dev_shm_are_bounded_on_any_engine(docker_image, caplog):
    config = SandboxConfig(image=docker_image, run_id="pytest", cpus=1.0, memory="1g", tmp_size="32m", shm_size="16m")
    with caplog.at_level(logging.WARNING, logger="air.sandbox.storage"):
        sandbox = await Sandbox.create(config)
    try:
        for path, limit in (("/tmp/big", 32), ("/dev/shm/big", 16)):
            result = await sandbox.run(FILL.format(path=path, mb=200, full="|".join(FULL)))
            filled(result.output, limit)
        after = await sandbox.run("rm /tmp/big /dev/shm/big && echo still here")
        assert after.output.strip() == "still here"
    finally:
        await sandbox.destroy()


@pytest.fixture
def on_quota_engine(quota_engine: SecondEngine, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", quota_engine.address)
    reset_docker_client()
    yield quota_engine
    reset_docker_client()  # the next client is made after monkeypatch restores DOCKER_HOST


@pytest.mark.docker
@pytest.mark.timeout(400)
async def test_a_runaway_file_hits_the_quota_and_the_rollout_goes_on(tmp_path, docker_image, on_quota_engine):
    # btrfs counts the image's files (~0.5 GB) against the limit too: 1200m leaves the agent about 0.7 GB.
    commands = [
        "cp sample_submission.csv submission.csv",
        FILL.format(path="big", mb=3000, full="|".join(FULL)),
        "validate",  # with the disk full: root's private copy of the workspace may not fit
        "rm big && validate",
    ]
    output, record = await run_attack(tmp_path, docker_image, commands, task="loanDefault", container_disk="1200m")
    honest = record.turns[3].evaluation
    assert honest is not None and honest.status == "ok", honest
    check_rollout(output, record, task="loanDefault", baseline=honest.score, ceiling=honest.score, secrets=[])
    filled(record.turns[1].output, 1200)
    full = record.turns[2].evaluation  # root's private copy did not fit: no score, and the agent is told why
    assert full is not None and full.status == "evaluation_failed" and full.score is None, full
    assert "The container's disk is full (Disk quota exceeded)" in full.error, full.error
