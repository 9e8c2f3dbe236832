"""A real Slurm cluster on this host for the fleet tests (scripts/slurm_cluster.sh): its own munged, slurmctld,
one slurmd per node and one Docker engine per node, all under one folder. Needs root and Debian's slurmctld,
slurmd, slurm-client, munge and docker.io; elsewhere the tests that use it skip with the reason (CI, which
installs them, fails instead).

Fixtures:
  slurm_cluster      one cluster of SESSION_NODES nodes for the session (tests must leave it as they found it:
                     cancel their jobs), with CLUSTER_IMAGES copied into every node's engine
  new_slurm_cluster  a factory for clusters of a test's own (stop, restart): new_slurm_cluster(nodes=1);
                     whatever it started and the test did not stop is stopped at the end of the test
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from rigs.patience import backstop

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "slurm_cluster.sh"
ENGINE_SCRIPT = ROOT / "scripts" / "second_docker_engine.sh"
# Images copied into every node's engine of the session cluster (from the engine DOCKER_HOST names, else the
# default one). None needed here; a suite that needs its sandbox image on the nodes names it.
CLUSTER_IMAGES: tuple[str, ...] = ()
SESSION_NODES = 2
COMMANDS = ("munged", "slurmctld", "slurmd", "srun", "sbatch", "scancel", "squeue", "sinfo", "dockerd", "docker")
MAX_DIR = 64  # the script's limit: Unix sockets live under the folder


def slurm_cluster_problem() -> str | None:
    if os.geteuid() != 0:
        return "a Slurm cluster on this host needs root (munged, slurmd and dockerd run as root)"
    missing = [command for command in COMMANDS if shutil.which(command) is None]
    if missing:
        return (
            f"a Slurm cluster on this host needs {', '.join(missing)}: "
            "apt-get install -y slurmctld slurmd slurm-client munge docker.io"
        )
    return None


def _script_env() -> dict[str, str]:
    # No SLURM_* of an outer job or cluster (srun inside one would take its allocation), and no DOCKER_HOST
    # of a node's engine: the images are copied from the main engine.
    return {k: v for k, v in os.environ.items() if not k.startswith("SLURM_") and k != "DOCKER_HOST"}


@dataclass(frozen=True)
class SlurmCluster:
    """A cluster started by scripts/slurm_cluster.sh: `env` is for subprocesses that use it (srun, sbatch...)."""

    dir: Path
    nodes: tuple[str, ...]
    env: dict[str, str]

    def run(self, *args: str, timeout: float = backstop(60), check: bool = True) -> subprocess.CompletedProcess[str]:
        """A command against this cluster (its SLURM_CONF), its output captured."""
        result = subprocess.run(args, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{' '.join(args)} exited {result.returncode}: {result.stdout}{result.stderr}")
        return result

    def engine_address(self, node: str) -> str:
        """The Docker engine of one node, as its job steps get it (DOCKER_HOST)."""
        return f"unix://{self.dir}/engines/{node}/docker.sock"

    def daemon_pids(self) -> dict[str, int]:
        """The pids the script recorded (munged, slurmctld, slurmd-nK, dockerd-nK), running or not."""
        files = {"munged": self.dir / "munge" / "munged.pid", "slurmctld": self.dir / "run" / "slurmctld.pid"}
        for node in self.nodes:
            files[f"slurmd-{node}"] = self.dir / "run" / f"slurmd-{node}.pid"
            files[f"dockerd-{node}"] = self.dir / "engines" / node / "docker.pid"
        return {name: int(path.read_text().strip()) for name, path in files.items() if path.is_file()}

    def env_node_steps(self, job: str) -> dict[str, str]:
        """node -> step id of a job's running env-node steps (air fleet submit names them env-node-NODE)."""
        out = self.run("squeue", "-s", "-j", job, "-h", "-o", "%i %j").stdout.split("\n")
        pairs = (line.split() for line in out if line.strip())
        return {name.removeprefix("env-node-"): step for step, name in pairs if name.startswith("env-node-")}

    def engine(self, action: str, node: str) -> None:
        """Stop or start one node's Docker engine (scripts/second_docker_engine.sh), as its host would."""
        folder = str(self.dir / "engines" / node)
        done = subprocess.run(["bash", str(ENGINE_SCRIPT), action, folder], env=_script_env(), capture_output=True,
                              text=True, timeout=backstop(300))  # fmt: skip
        assert done.returncode == 0, done.stderr

    def status(self) -> subprocess.CompletedProcess[str]:
        return _script("status", self.dir, check=False)

    def stop(self) -> None:
        _script("stop", self.dir)


def _script(action: str, folder: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        ["bash", str(SCRIPT), action, str(folder), *args],
        env=_script_env(),
        capture_output=True,
        text=True,
        timeout=backstop(300),
    )
    if check and result.returncode != 0:
        raise RuntimeError(f"slurm_cluster.sh {action} {folder} failed: {result.stdout[-2000:]}{result.stderr[-2000:]}")
    return result


def start_cluster(folder: Path, nodes: int, images: tuple[str, ...] = ()) -> SlurmCluster:
    image_args = [arg for image in images for arg in ("--image", image)]
    _script("start", folder, "--nodes", str(nodes), *image_args)
    env = {**_script_env(), "SLURM_CONF": str(folder / "slurm.conf")}
    return SlurmCluster(dir=folder, nodes=tuple(f"n{k}" for k in range(1, nodes + 1)), env=env)


def _cluster_dir(tmp_path_factory: pytest.TempPathFactory, name: str) -> Path:
    folder = tmp_path_factory.mktemp(name)
    if len(str(folder)) <= MAX_DIR:
        return folder
    return Path(tempfile.mkdtemp(prefix=f"air-{name}-"))  # a long --basetemp: sockets need a short path


def _require() -> None:
    problem = slurm_cluster_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"the Slurm cluster tests must run in CI: {problem}")
        pytest.skip(problem)


def _stop_and_clean(cluster_dir: Path) -> None:
    try:
        _script("stop", cluster_dir)
    finally:
        shutil.rmtree(cluster_dir / "engines", ignore_errors=True)  # the engines' data; the logs stay


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    _require()
    folder = _cluster_dir(tmp_path_factory, "slurm")
    try:
        yield start_cluster(folder, SESSION_NODES, CLUSTER_IMAGES)
    finally:
        _stop_and_clean(folder)


@pytest.fixture
def new_slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., SlurmCluster]]:
    _require()
    started: list[Path] = []

    def start(nodes: int = 1, images: tuple[str, ...] = ()) -> SlurmCluster:
        folder = _cluster_dir(tmp_path_factory, "slurm-own")
        started.append(folder)
        return start_cluster(folder, nodes, images)

    yield start
    for folder in started:
        _stop_and_clean(folder)
