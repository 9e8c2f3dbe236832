"""scripts/slurm_cluster.sh: a real Slurm cluster on one host whose job steps each reach their own node's Docker
engine, whose steps can be cancelled one at a time, and whose stop leaves no process behind."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import pytest

from tests.fleet.conftest import SlurmCluster

# They start Docker engines (one per node): one at a time, on one xdist worker, like the second-engine tests.
pytestmark = pytest.mark.xdist_group("one_at_a_time")
T = TypeVar("T")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"  # a zombie has ended
    except (FileNotFoundError, IndexError):
        return False


def _wait_for(what: str, condition: Callable[[], T], timeout: float = 30) -> T:
    deadline = time.monotonic() + timeout
    while not (result := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"waited {timeout} s for {what}")
        time.sleep(0.2)
    return result


def _pid_written_to(file: Path) -> int:
    return int(_wait_for(f"a pid in {file}", lambda: file.is_file() and file.read_text().strip()))


def _children(pid: int) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(") ", 1)[1].split()
        except (FileNotFoundError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return found


def test_a_step_on_each_node_gets_its_own_node_name_and_docker_engine(slurm_cluster: SlurmCluster) -> None:
    marker = f"air-fleet-{uuid.uuid4().hex[:8]}"
    seen = {}
    try:
        for node in slurm_cluster.nodes:
            step = (
                'echo "$SLURMD_NODENAME $AIR_NODE_NAME $DOCKER_HOST"; '
                f'docker volume create "{marker}-$SLURMD_NODENAME" >/dev/null; '
                'docker info --format "{{.DockerRootDir}}"; docker volume ls -q'
            )
            out = slurm_cluster.run("srun", "-w", node, "-N1", "-n1", "sh", "-c", step).stdout.split()
            seen[node] = out
            assert out[:3] == [node, node, slurm_cluster.engine_address(node)], out
            assert out[3] == f"{slurm_cluster.dir}/engines/{node}/data", out
        # Each engine holds only what its own node's step made: they are different engines (their `docker
        # info` IDs are alike here: Docker 20.10 derives it from /etc/docker/key.json, which both read).
        for node in slurm_cluster.nodes:
            made_here = {volume for volume in seen[node][4:] if volume.startswith(marker)}
            assert made_here == {f"{marker}-{node}"}, seen
    finally:
        for node in slurm_cluster.nodes:
            remove = f'docker volume rm "{marker}-{node}"'
            slurm_cluster.run("srun", "-w", node, "-N1", "-n1", "sh", "-c", remove, check=False)


def test_cancelling_one_of_two_concurrent_steps_leaves_the_other_running(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    first, second = slurm_cluster.nodes[:2]
    script = tmp_path / "two_steps.sh"
    script.write_text(
        "#!/bin/sh\n"
        + "".join(
            f"srun -w {node} -N1 -n1 sh -c 'echo $$ > {tmp_path}/pid-$SLURMD_NODENAME; exec sleep 300' &\n"
            for node in (first, second)
        )
        + "wait\n"
    )
    job = slurm_cluster.run("sbatch", "--parsable", "-N2", "-n2", "-o", str(tmp_path / "job.out"), str(script))
    job_id = job.stdout.strip().split(";")[0]
    try:

        def steps() -> dict[str, str]:  # node -> step id, the job's running steps (not its batch step)
            out = slurm_cluster.run("squeue", "-h", "-s", "-j", job_id, "-o", "%i %N %T").stdout
            return {
                line.split()[1]: line.split()[0] for line in out.splitlines() if not line.split()[0].endswith(".batch")
            }

        running = _wait_for("both steps to run", lambda: len(steps()) == 2 and steps())
        pids = {node: _pid_written_to(tmp_path / f"pid-{node}") for node in (first, second)}
        assert all(_alive(pid) for pid in pids.values())

        slurm_cluster.run("scancel", running[first])

        _wait_for(f"{first}'s step to end", lambda: not _alive(pids[first]) and first not in steps())
        time.sleep(1)  # the other step has had time to go too, were the cancel wider than the one step
        assert _alive(pids[second])
        assert steps() == {second: running[second]}
    finally:
        slurm_cluster.run("scancel", job_id, check=False)
        _wait_for("the job to leave the queue", lambda: not slurm_cluster.run("squeue", "-h", "-j", job_id).stdout)


def test_stop_leaves_no_process_of_its_cluster(new_slurm_cluster: Callable[..., SlurmCluster], tmp_path: Path) -> None:
    cluster = new_slurm_cluster(nodes=1)
    assert cluster.status().returncode == 0
    daemons = cluster.daemon_pids()
    assert set(daemons) == {"munged", "slurmctld", "slurmd-n1", "dockerd-n1"}
    assert all(_alive(pid) for pid in daemons.values()), daemons
    # A job still running when the cluster stops: stop cancels it, and its processes go with it.
    pid_file = tmp_path / "step.pid"
    step = f"srun sh -c 'echo $$ > {pid_file}; exec sleep 300'"
    cluster.run("sbatch", "-N1", "-o", "/dev/null", "--wrap", step)
    task = _pid_written_to(pid_file)
    step_daemon = int(Path(f"/proc/{task}/stat").read_text().rsplit(") ", 1)[1].split()[1])  # its slurmstepd
    assert "slurmstepd" in Path(f"/proc/{step_daemon}/cmdline").read_text()
    # slurmctld's slurmscriptd and dockerd's containerd too
    processes = {
        *daemons.values(),
        task,
        step_daemon,
        *_children(daemons["slurmctld"]),
        *_children(daemons["dockerd-n1"]),
    }
    assert len(processes) >= len(daemons) + 4, processes

    cluster.stop()

    assert [pid for pid in processes if _alive(pid)] == []
    status = cluster.status()
    assert status.returncode == 3 and status.stdout.splitlines()[-1].endswith(": stopped"), status.stdout
