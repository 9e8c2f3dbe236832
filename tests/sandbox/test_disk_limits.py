"""What a container may write (issue 20, class 8; issue 31, item 5): a disk quota where the engine's storage driver
can size containers, the container's writable size watched where it cannot, each file the agent writes capped, and
/tmp and /dev/shm of their own size on every engine.

The quota needs an engine that can size containers: ``quota_engine`` is a second engine whose data root is a
btrfs file (CI has root and btrfs); this host's main engine (overlay2 on ext4) cannot, and says so once: there
the watch keeps the limit.
"""

from __future__ import annotations

import logging
import re
import time

import pytest

from air.env.settings import MLGymEnvSettings
from air.sandbox.config import SandboxConfig, owner_labels, size_bytes
from air.sandbox.container import Sandbox, container_kwargs, reset_docker_client
from air.sandbox.disk_watch import MIN_DELAY_S, DiskWatch
from air.sandbox.protocol import shell_argv
from air.sandbox.storage import NO_PQUOTA, human_size, quota_refused_hint, quota_summary, storage_kwargs, watches_disk
from rigs.patience import backstop
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
    assert kwargs["tmpfs"] == {
        "/tmp": "rw,nosuid,nodev,mode=1777,size=64m,nr_inodes=4096",
        "/dev/shm": "rw,nosuid,nodev,mode=1777,size=32m,nr_inodes=4096",
    }
    assert "shm_size" not in kwargs


def test_air_check_says_which_an_engine_has():
    assert quota_summary("overlay2 on xfs") == (
        True,
        "engine quota (overlay2 on xfs, pquota): each container's writes stop at its disk limit",
    )
    quota, said = quota_summary("overlay2 on extfs")
    assert not quota and said.startswith("watched (no quota: overlay2 on extfs)"), said
    assert "sudo bash scripts/engine_quota.sh" in said, said
    assert not quota_summary(NO_PQUOTA)[0]


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
    with pytest.raises(ValueError, match=rf"max_file_size must be a whole size like .*{re.escape(size)}"):
        SandboxConfig(max_file_size=size)
    with pytest.raises(ValueError, match=rf"container_disk must be a whole size like .*{re.escape(size)}"):
        MLGymEnvSettings(container_disk=size)


def test_sizes_in_bytes_and_back():
    assert [size_bytes(s) for s in ("4g", "8M", "512", "3k", "1t")] == [4 << 30, 8 << 20, 512, 3 << 10, 1 << 40]
    assert size_bytes("") == 0  # no limit
    assert [human_size(n) for n in (64 << 20, int(100.4 * 2**20), 20 << 30, 900)] == ["64M", "100.4M", "20G", "900B"]


def test_the_shell_starts_under_the_file_size_limit_in_blocks_of_1024_bytes():
    assert shell_argv(8 << 20)[2].startswith("ulimit -f 8192 2>/dev/null; ")
    assert shell_argv(1000)[2].startswith("ulimit -f 1 ")  # rounded up: a limit is never 0 (no file at all)
    assert "ulimit" not in shell_argv(None)[2]


def test_only_an_engine_without_a_quota_gets_the_watch():
    config = SandboxConfig(image="x", disk="3g")
    assert watches_disk(config, "overlay2 on extfs") and watches_disk(config, None)  # None: the engine did not say
    assert not any(watches_disk(config, driver) for driver in ("btrfs", "zfs", "overlay2 on xfs"))
    assert not watches_disk(config.model_copy(update={"disk": ""}), "overlay2 on extfs")


def test_checks_come_sooner_as_the_limit_nears_and_never_load_the_engine():
    watch = DiskWatch(None, SandboxConfig(image="x", disk="20g", disk_check_s=10), None, enabled=True)  # type: ignore[arg-type]
    delays = []
    for used in (0, 18 << 30, 19 << 30, (20 << 30) - (1 << 20), 21 << 30):
        watch.used = used
        delays.append(watch.next_delay())
    assert delays == [10, 2, 1, MIN_DELAY_S, MIN_DELAY_S]
    watch.used, watch.cost_s = (20 << 30) - (1 << 29), 0.2  # many files: a check costs more, comes less often
    assert watch.next_delay() == 0.8
    watch.cost_s = 5.0  # but a slow check never makes the watch blind for longer than disk_check_s, nor near the
    assert watch.next_delay() == 2.0  # limit for longer than a folder bomb needs to pass what is left (512M: 2 s)
    watch.used = 0
    assert watch.next_delay() == 10


def test_an_evaluation_asks_the_engine_only_when_the_limit_could_have_been_passed():
    watch = DiskWatch(None, SandboxConfig(image="x", disk="20g"), None, enabled=True)  # type: ignore[arg-type]
    assert watch.could_be_over()  # never checked
    watch.used, watch.checked_at = 1 << 30, time.monotonic()
    assert not watch.could_be_over()  # 19 GiB left: not writable in the moment since
    watch.checked_at -= 30  # 30 s at a fast disk's 1 GiB/s could have filled it
    assert watch.could_be_over()
    watch.used, watch.checked_at = 21 << 30, time.monotonic()
    assert watch.could_be_over()  # over at the last check
    assert not DiskWatch(None, SandboxConfig(image="x", disk="20g"), None).could_be_over()  # type: ignore[arg-type]


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


@pytest.fixture
async def small_disk(docker_image):
    """A sandbox whose files may take 64 MiB, 8 MiB each, checked every half second at most."""
    config = SandboxConfig(
        image=docker_image,
        run_id="pytest",
        cpus=1.0,
        memory="1g",
        tmp_size="512m",
        disk="64m",
        max_file_size="8m",
        disk_check_s=0.5,
        disk_layer="watch",  # the watch, as where this process cannot loop-mount (test_disk_image: the kernel's)
        # The watch interrupts the writer as a timeout would; on a loaded host the shell can take longer than the
        # default 5 s to come back, and is then replaced (its exports lost), which these tests read as a failure.
        interrupt_grace_s=backstop(5.0),
    )
    sandbox = await Sandbox.create(config)
    try:
        yield sandbox
    finally:
        await sandbox.destroy()


@pytest.mark.docker
@pytest.mark.timeout(120)
async def test_a_file_past_max_file_size_fails_its_command_and_the_next_works(small_disk: Sandbox):
    big = await small_disk.run("head -c 20M /dev/zero > big; echo exit $?; stat -c %s big")
    assert big.output.split() == ["exit", "153", str(8 << 20)], big.output  # SIGXFSZ (128 + 25) at 8 MiB
    python = await small_disk.run("python3 -c \"open('big', 'wb').write(bytes(20 << 20))\"")
    assert python.exit_code == 1 and "OSError: [Errno 27] File too large" in python.output, python.output
    after = await small_disk.run("rm big && head -c 7M /dev/zero > fits && echo still here")
    assert after.exit_code == 0 and after.output == "still here\n", after.output


@pytest.mark.docker
@pytest.mark.timeout(120)
async def test_the_agent_cannot_raise_the_file_size_limit(small_disk: Sandbox):
    raised = await small_disk.run("ulimit -H -f unlimited")
    assert raised.exit_code == 1 and "Operation not permitted" in raised.output, raised.output
    raised = await small_disk.run("ulimit -S -f unlimited; ulimit -S -f")  # bash gives the hard limit instead
    assert raised.output == "8192\n", raised.output
    limits = await small_disk.run(
        "ulimit -S -f; ulimit -H -f; bash -c 'ulimit -H -f'; python3 -c "
        '"import resource; print(resource.getrlimit(resource.RLIMIT_FSIZE))"'
    )
    assert limits.output.split("\n")[:4] == ["8192", "8192", "8192", f"({8 << 20}, {8 << 20})"], limits.output


# Writes 4 MiB files, below the file size limit, until 400 MiB (were the watch to miss them all).
WRITER = "for i in $(seq 100); do head -c 4M /dev/zero > f$i; sleep 0.1; done; echo never"
OVER = re.compile(r"the sandbox holds [\d.]+M of its 64M disk limit: delete files \(rm\) to go on")


@pytest.mark.docker
@pytest.mark.timeout(120)
async def test_writing_past_the_disk_limit_stops_the_writer_and_fails_commands_until_files_go(small_disk: Sandbox):
    shell = small_disk.shell.pid
    await small_disk.run("export KEEP=me")
    writer = await small_disk.run(WRITER, timeout=60)
    assert writer.halted and not writer.timed_out and writer.exit_code != 0 and not writer.shell_restarted, writer
    assert "never" not in writer.output and OVER.search(writer.output), writer.output
    still = await small_disk.run("ls f* | wc -l; echo $KEEP")
    files, keep = still.output.split()[:2]
    assert still.exit_code == 1 and OVER.search(still.output) and keep == "me", still.output  # the same shell
    assert 16 <= int(files) < 100, still.output  # past the limit (16 files and 4 KiB an entry), and stopped there
    assert await small_disk.over_disk_limit() == small_disk.disk.message()
    freed = await small_disk.run("rm f* && echo freed")
    assert freed.exit_code == 0 and freed.output == "freed\n", freed.output
    assert await small_disk.over_disk_limit() is None
    after = await small_disk.run("head -c 4M /dev/zero > f1 && echo $KEEP")
    assert after.exit_code == 0 and after.output == "me\n" and small_disk.shell.pid == shell, after.output


@pytest.mark.docker
@pytest.mark.timeout(120)
async def test_a_background_writer_is_killed_and_the_command_in_flight_stopped(small_disk: Sandbox):
    started = await small_disk.run(f"nohup bash -c '{WRITER}' >/dev/null 2>&1 & echo started")
    assert started.output.strip().endswith("started"), started.output
    waiting = await small_disk.run("sleep 50; echo never", timeout=60)  # the watch stops it long before
    assert waiting.halted and "never" not in waiting.output and OVER.search(waiting.output), waiting.output
    left = await small_disk.run("ps -u agent -o comm=")  # one program: no pipeline's half-started bash
    programs, note = left.output.split("\n[", 1)  # still over the limit: the command failed, with the note
    assert sorted(programs.split()) == ["bash", "ps"] and OVER.match(note), left.output  # the shell, and ps
    assert (await small_disk.run("rm f* && echo freed")).output == "freed\n"
