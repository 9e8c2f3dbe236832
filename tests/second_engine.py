"""A second Docker engine the tests may stop and start (scripts/second_docker_engine.sh): its own socket,
data root and containers, so restarting it never touches the engine other tests and suites use. Needs
root and dockerd (CI has both); elsewhere the tests that use it skip with the reason."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import docker
import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "second_docker_engine.sh"


class SecondEngine:
    def __init__(self, folder: Path, image: str, btrfs_size: str = "") -> None:
        self.folder = folder
        self.image = image
        self.btrfs_size = btrfs_size
        self.address = f"unix://{folder}/docker.sock"

    def _script(self, *args: str, timeout: float = 300) -> None:
        env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}  # `docker save` reads the main one
        result = subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=timeout)
        if result.returncode != 0:
            raise RuntimeError(f"second_docker_engine.sh {' '.join(args)} failed: {result.stderr[-2000:]}")

    def start(self) -> None:
        """Start it (a no-op when it answers) with the sandbox image in it."""
        btrfs = ["--btrfs", self.btrfs_size] if self.btrfs_size else []
        self._script("start", str(self.folder), *btrfs, self.image)

    def stop(self) -> None:
        """Stop it as a host's restart does: dockerd gets SIGTERM and stops its containers."""
        self._script("stop", str(self.folder))

    def client(self) -> docker.DockerClient:
        return docker.DockerClient(base_url=self.address, timeout=30)

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


@pytest.fixture(scope="session")
def quota_engine(docker_image: str, tmp_path_factory: pytest.TempPathFactory):
    """A second engine on a btrfs data root: its storage driver sizes containers (a disk quota)."""
    problem = second_engine_problem() or btrfs_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"the disk-quota tests must run in CI: {problem}")
        pytest.skip(problem)
    engine = SecondEngine(tmp_path_factory.mktemp("quota-engine"), docker_image, btrfs_size="4G")
    engine.start()
    yield engine
    engine.stop()
    shutil.rmtree(engine.folder, ignore_errors=True)


@pytest.fixture(scope="session")
def second_engine(docker_image: str, tmp_path_factory: pytest.TempPathFactory):
    problem = second_engine_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"the engine-restart tests must run in CI: {problem}")
        pytest.skip(problem)
    engine = SecondEngine(tmp_path_factory.mktemp("engine"), docker_image)
    engine.start()
    yield engine
    engine.stop()
    shutil.rmtree(engine.folder, ignore_errors=True)
