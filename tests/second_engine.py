"""A second Docker engine the tests may stop and start (scripts/second_docker_engine.sh): its own socket,
data root and containers, so restarting it never touches the engine other tests and suites use. Needs
root and dockerd (CI has both); elsewhere the tests that use it skip with the reason."""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import docker
import pytest

from rigs.patience import backstop

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "second_docker_engine.sh"


class SecondEngine:
    def __init__(
        self, folder: Path, image: str, btrfs_size: str = "", xfs: str = "", userns_remap: bool = False
    ) -> None:
        self.folder = folder
        self.userns_remap = userns_remap  # its containers in a user namespace of the engine's
        self.image = image
        self.btrfs_size = btrfs_size
        self.xfs = xfs  # "--xfs SIZE" (pquota) or "--xfs-noquota SIZE", as the script takes them
        self.address = f"unix://{folder}/docker.sock"

    def _script(self, *args: str, timeout: float = backstop(300)) -> None:
        env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}  # `docker save` reads the main one
        result = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"second_docker_engine.sh {' '.join(args)} failed: {result.stderr[-2000:]}")

    def start(self) -> None:
        """Start it (a no-op when it answers) with the sandbox image in it."""
        btrfs = ["--btrfs", self.btrfs_size] if self.btrfs_size else []
        remap = ["--userns-remap"] if self.userns_remap else []
        self._script("start", str(self.folder), *btrfs, *self.xfs.split(), *remap, self.image)

    def stop(self) -> None:
        """Stop it as a host's restart does: dockerd gets SIGTERM and stops its containers."""
        self._script("stop", str(self.folder))

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.address, timeout=backstop(30))

    def containers(self, run_id: str) -> list[str]:
        """Ids of a run's containers on this engine, stopped ones included."""
        client = self.client()
        try:
            found = client.containers.list(all=True, filters={"label": f"air.run={run_id}"}, ignore_removed=True)
            return [c.id for c in found]
        finally:
            client.close()


def second_engine_problem() -> str | None:
    if os.geteuid() != 0:
        return "a second Docker engine needs root"
    if shutil.which("dockerd") is None or shutil.which("docker") is None:
        return "a second Docker engine needs dockerd and the docker CLI (apt-get install -y docker.io)"
    return None


def btrfs_problem() -> str | None:
    if shutil.which("mkfs.btrfs") is None:
        return "an engine on btrfs needs mkfs.btrfs (apt-get install -y btrfs-progs)"
    if "btrfs" not in Path("/proc/filesystems").read_text():
        return "this kernel has no btrfs"
    return None


def xfs_problem(pquota: bool) -> str | None:
    if shutil.which("mkfs.xfs") is None:
        return "an engine on xfs needs mkfs.xfs (apt-get install -y xfsprogs)"
    if "xfs" not in Path("/proc/filesystems").read_text():
        return "this kernel has no xfs"
    return xfs_quota_problem() if pquota else None


@functools.cache
def xfs_quota_problem() -> str | None:
    """Why an xfs file cannot be mounted with project quotas here (a kernel built without CONFIG_XFS_QUOTA mounts
    xfs but refuses pquota: this machine's and CI's), or None."""
    with tempfile.TemporaryDirectory(prefix="air-xfs-") as folder:
        image, mount = Path(folder) / "xfs.img", Path(folder) / "mnt"
        mount.mkdir()
        subprocess.run(["truncate", "-s", "320M", str(image)], check=True)
        subprocess.run(["mkfs.xfs", "-q", str(image)], check=True, capture_output=True)
        tried = subprocess.run(["mount", "-o", "loop,pquota", str(image), str(mount)], capture_output=True, text=True)
        if tried.returncode != 0:
            return f"this kernel's xfs has no project quotas (CONFIG_XFS_QUOTA): {tried.stderr.strip()[:200]}"
        subprocess.run(["umount", str(mount)], check=True)
    return None


def _engine_on_xfs(docker_image: str, factory: pytest.TempPathFactory, pquota: bool):
    problem = second_engine_problem() or xfs_problem(pquota)
    if problem:
        # A kernel without xfs quotas is the host's, not the suite's fault: a skip that says so, in CI too.
        if os.environ.get("CI") and "CONFIG_XFS_QUOTA" not in problem:
            pytest.fail(f"the xfs disk-quota tests must run in CI: {problem}")
        pytest.skip(problem)
    flag = "--xfs" if pquota else "--xfs-noquota"
    engine = SecondEngine(factory.mktemp("xfs-engine"), docker_image, xfs=f"{flag} 2G")
    engine.start()
    return engine


@pytest.fixture(scope="session")
def xfs_quota_engine(docker_image: str, tmp_path_factory: pytest.TempPathFactory):
    """A second engine whose data root is an xfs file mounted with pquota: overlay2 sizes its containers."""
    engine = _engine_on_xfs(docker_image, tmp_path_factory, pquota=True)
    yield engine
    engine.stop()
    shutil.rmtree(engine.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def xfs_noquota_engine(docker_image: str, tmp_path_factory: pytest.TempPathFactory):
    """The same without pquota: the engine says "overlay2 on xfs" and refuses a container's size."""
    engine = _engine_on_xfs(docker_image, tmp_path_factory, pquota=False)
    yield engine
    engine.stop()
    shutil.rmtree(engine.folder, ignore_errors=True)


def _session_engine(docker_image: str, factory: pytest.TempPathFactory, what: str, problem: str | None, **kwargs):
    """A session fixture's second engine (``SecondEngine``'s ``kwargs``): started, yielded, then stopped and its
    folder removed. Skipped with ``problem``, or failed in CI: the ``what`` tests must run there."""
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"the {what} tests must run in CI: {problem}")
        pytest.skip(problem)
    engine = SecondEngine(factory.mktemp(f"{what}-engine"), docker_image, **kwargs)
    engine.start()
    yield engine
    engine.stop()
    shutil.rmtree(engine.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def quota_engine(docker_image: str, tmp_path_factory: pytest.TempPathFactory):
    """A second engine on a btrfs data root: its storage driver sizes containers (a disk quota)."""
    problem = second_engine_problem() or btrfs_problem()
    yield from _session_engine(docker_image, tmp_path_factory, "disk-quota", problem, btrfs_size="4G")


@pytest.fixture(scope="session")
def remapping_engine(docker_image: str, tmp_path_factory: pytest.TempPathFactory):
    """A second engine with ``userns-remap``: every container in a user namespace of 65,536 uids."""
    problem = second_engine_problem()
    yield from _session_engine(docker_image, tmp_path_factory, "userns-remap", problem, userns_remap=True)


@pytest.fixture(scope="session")
def second_engine(docker_image: str, tmp_path_factory: pytest.TempPathFactory):
    problem = second_engine_problem()
    yield from _session_engine(docker_image, tmp_path_factory, "engine-restart", problem)
