"""Issue 50, item 2: the quota most hosts can have, overlay2 on xfs with project quotas (``--storage-opt size=``),
what happens on an engine on xfs without them, and scripts/engine_quota.sh, which gives the main engine one (xfs
with pquota where the kernel has xfs quotas, else btrfs with simple quotas).

Each engine here is a second one (scripts/second_docker_engine.sh --xfs / --xfs-noquota: its data root on an xfs
loop file). With pquota every attack of the disk round stops at the limit inside the container (the write fails:
"No space left on device" or "Disk quota exceeded") and the container's upper folder holds no more than the
limit. Without pquota the engine says "overlay2 on xfs" yet refuses the size: air finds it out once and watches
instead, where before every sandbox failed to start. A kernel built without CONFIG_XFS_QUOTA (this machine's)
refuses pquota: the quota tests skip there, saying so; engine_quota.sh --fs xfs refuses too, changing nothing,
and without --fs takes btrfs (its real work is tested here on paths of the test's own, never the main engine).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import docker
import pytest

from air.sandbox.config import SandboxConfig
from air.sandbox.container import Sandbox, reset_docker_client
from air.sandbox.storage import NO_PQUOTA, storage_driver
from rigs.patience import backstop
from tests.host_disk import container_bytes
from tests.red_team import check_rollout, honest_evaluation, run_attack
from tests.second_engine import (  # noqa: F401  (fixtures)
    SecondEngine,
    quota_engine,
    xfs_noquota_engine,
    xfs_quota_engine,
    xfs_quota_problem,
)

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("one_at_a_time")]

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = str(ROOT / "scripts" / "engine_quota.sh")
FULL = ("No space left on device", "Disk quota exceeded")
# The disk round's attacks, each run in the workspace under a 200m limit (benchmarks/disk_overshoot.py measures
# them on the host's disk).
ATTACKS = {
    "writes": "for i in $(seq 100); do head -c 4M /dev/zero > w$i || break; done",
    "fallocate": "for i in 1 2 3; do touch f$i && fallocate -n -l 1G f$i || break; done",
    "folders": "python3 -c \"import os; os.mkdir('m'); [os.mkdir(f'm/{i}') for i in range(250000)]\"",
}


def _on(engine: SecondEngine, monkeypatch) -> docker.DockerClient:
    monkeypatch.setenv("DOCKER_HOST", engine.address)
    reset_docker_client()
    return engine.client()


@pytest.fixture
def on_xfs(xfs_quota_engine: SecondEngine, monkeypatch):  # noqa: F811
    client = _on(xfs_quota_engine, monkeypatch)
    yield client
    client.close()
    reset_docker_client()


@pytest.fixture
def on_xfs_noquota(xfs_noquota_engine: SecondEngine, monkeypatch):  # noqa: F811
    client = _on(xfs_noquota_engine, monkeypatch)
    yield client
    client.close()
    reset_docker_client()


@pytest.mark.timeout(300)
@pytest.mark.parametrize("attack", list(ATTACKS))
async def test_the_xfs_quota_stops_each_attack_at_the_limit(on_xfs, docker_image, attack):
    assert storage_driver(on_xfs) == "overlay2 on xfs"
    config = SandboxConfig(image=docker_image, run_id="pytest", cpus=1.0, memory="2g", disk="200m")
    box = await Sandbox.create(config, on_xfs)
    try:
        assert not box.disk.enabled  # the quota keeps the limit: no watch
        result = await box.run(ATTACKS[attack], timeout=200)
        # 250,000 empty folders fit: their inodes (512 bytes each on xfs) are outside the engine's block quota.
        assert attack == "folders" or any(full in result.output for full in FULL), result.output
        assert container_bytes(box.container, held=False) <= 200 << 20  # no block past the limit on the host's disk
    finally:
        await box.destroy()


@pytest.mark.timeout(400)
async def test_reserved_blocks_fail_inside_the_container_through_the_rollout_path(on_xfs, tmp_path, docker_image):
    commands = [ATTACKS["fallocate"] + "; echo went on", "validate", "rm -f f?; ls", "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands, container_disk="200m")
    check_rollout(output, record)
    said = record.turns[0].output
    assert any(full in said for full in FULL) and "went on" in said and "disk limit" not in said, said
    honest_evaluation(record, 3)


@pytest.mark.timeout(300)
async def test_an_engine_on_xfs_without_pquota_is_watched_not_refused(on_xfs_noquota, docker_image):
    assert storage_driver(on_xfs_noquota) == NO_PQUOTA
    # The watch, as where this process cannot loop-mount (disk_layer 'auto' gives the container an fs of its own).
    config = SandboxConfig(image=docker_image, run_id="pytest", cpus=1.0, memory="2g", disk="200m", disk_layer="watch")
    box = await Sandbox.create(config, on_xfs_noquota)  # before: "--storage-opt is supported only for ... pquota"
    try:
        assert box.disk.enabled
        result = await box.run(ATTACKS["fallocate"] + "; sleep 8; echo never", timeout=60)
        assert "never" not in result.output and "disk limit" in result.output, result.output
    finally:
        await box.destroy()


def _engine_quota(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", SCRIPT, *args], capture_output=True, text=True, env=env, timeout=backstop(300))


def test_engine_quota_sh_refuses_and_changes_nothing(docker_image):
    if os.geteuid() != 0:
        pytest.skip("the refusals past the first need root")
    daemon_json = Path("/etc/docker/daemon.json")
    before = daemon_json.read_text() if daemon_json.exists() else None
    as_nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", "bash", SCRIPT, "200G"]
    said = subprocess.run(as_nobody, capture_output=True, text=True)
    assert said.returncode == 1 and "run it as root" in said.stderr, said
    for wrong in (["lots"], ["--fs", "zfs", "200G"], ["--fs", "xfs"]):
        said = _engine_quota(*wrong)
        assert said.returncode == 2 and "usage" in said.stderr, (wrong, said)
    # Never the plain SIZE here: on this machine it would move the main engine, which other suites use, to btrfs.
    if xfs_quota_problem() is not None:  # this kernel: refused before anything is made
        said = _engine_quota("--fs", "xfs", "200G")
        assert said.returncode == 1 and "no quota support (CONFIG_XFS_QUOTA" in said.stderr, said
    else:  # a kernel with xfs quotas: refused while a container runs (the engine would restart under it)
        client = docker.from_env()
        busy = client.containers.run(docker_image, ["sleep", "60"], detach=True, network_mode="none")
        try:
            said = _engine_quota("--fs", "xfs", "200G")
        finally:
            busy.remove(force=True)
            client.close()
        assert said.returncode == 1 and "containers are running" in said.stderr, said
    assert "nothing changed" in said.stderr, said
    assert (daemon_json.read_text() if daemon_json.exists() else None) == before
    assert not Path("/var/lib/docker-xfs.img").exists()
    assert not Path("/var/lib/docker-btrfs.img").exists()


@pytest.mark.timeout(300)
def test_engine_quota_sh_btrfs_route_on_a_throwaway_target(quota_engine: SecondEngine, tmp_path):  # noqa: F811
    """The btrfs route's real work (a btrfs file, mounted, simple quotas on, fstab, daemon.json) on paths of the
    test's own (AIR_QUOTA_*: dockerd is then left alone), asking the idle quota engine whether containers run."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("AIR_QUOTA_")}
    root, fstab, daemon_json = tmp_path / "root", tmp_path / "fstab", tmp_path / "daemon.json"
    env.update(
        DOCKER_HOST=quota_engine.address,
        AIR_QUOTA_IMAGE=str(tmp_path / "btrfs.img"),
        AIR_QUOTA_ROOT=str(root),
        AIR_QUOTA_FSTAB=str(fstab),
        AIR_QUOTA_DAEMON_JSON=str(daemon_json),
    )
    daemon_json.write_text('{"log-level": "warn"}\n')
    try:
        for _ in range(2):  # the second run finds it all done and changes nothing
            said = _engine_quota("--fs", "btrfs", "1G", env=env)
            assert said.returncode == 0 and "restart dockerd yourself" in said.stdout, said
            assert json.loads(daemon_json.read_text()) == {
                "log-level": "warn",
                "data-root": str(root),
                "storage-driver": "btrfs",
            }
            assert fstab.read_text() == f"{tmp_path}/btrfs.img {root} btrfs loop,noatime 0 0\n"
            mounted = subprocess.run(
                ["findmnt", "-n", "-o", "FSTYPE,UUID,OPTIONS", str(root)], capture_output=True, text=True
            )
            fstype, uuid, options = mounted.stdout.split()
            # noatime: else removing a container whose quota is full commits a transaction per folder read.
            assert fstype == "btrfs" and "noatime" in options.split(","), options
            # Simple quotas, not the full ones dockerd would turn on (they stop counting once a container goes).
            assert Path(f"/sys/fs/btrfs/{uuid}/qgroups/mode").read_text().strip() == "squota"
        assert (tmp_path / "daemon.json.before-air-quota").read_text() == '{"log-level": "warn"}\n'
        said = _engine_quota("--fs", "xfs", "1G", env=env)  # the root is btrfs: no xfs over it
        assert said.returncode == 1 and "nothing changed" in said.stderr, said
        assert json.loads(daemon_json.read_text())["storage-driver"] == "btrfs"
    finally:
        subprocess.run(["umount", str(root)], capture_output=True)
