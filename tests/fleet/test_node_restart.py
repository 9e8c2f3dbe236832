"""A restart of an env node leaves nothing of its previous start: a node killed alone (SIGKILL to `air fleet
node` only) leaves its env server running, reparented to init, and the next start of that node ends it, by
the pid and start time the killed start recorded, before it publishes its own record. By hand, and under a
real Slurm cluster on this host, whose proctrack/linuxproc lets such an orphan outlive the step. (The stub
env server stays orphaned; air.env.v1_serve, the real one, also ends itself when its node goes.)"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from air.fleet.folder import FleetFolder
from air.fleet.node import private_prefix
from air.fleet.previous_start import RECORD_NAME, end_previous_start, record_start
from rigs.fleet import STUB, Processes, make_folder, node_command, remove_private, wait_for
from rigs.patience import backstop
from tests.fleet.conftest import SlurmCluster

ROOT = Path(__file__).resolve().parents[2]
# The stub behind air.env.v1_serve's watch on its node, as the real env server runs it.
WATCHING = "import sys; from air.env.v1_serve import end_with_node; end_with_node(); import rigs.stub_env_server as s"
WATCHING_STUB = [sys.executable, "-c", f"{WATCHING}; sys.exit(s.main(sys.argv[1:]))"]


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _env_servers(folder: FleetFolder, name: str) -> list[psutil.Process]:
    """The stub env servers serving node ``name`` of this fleet, whichever start began them: each is given
    its node's private socket on its command line."""
    socket = f"ipc://{private_prefix(folder)}{name}/env.sock"
    found = []
    for process in psutil.process_iter(["cmdline", "status"]):
        if socket in (process.info["cmdline"] or []) and process.info["status"] != psutil.STATUS_ZOMBIE:
            found.append(process)
    return found


def _end(processes: list[psutil.Process]) -> None:
    for process in processes:
        process.kill()
    psutil.wait_procs(processes, timeout=backstop(30))


def _published_by(folder: FleetFolder, name: str, pid: int) -> bool:
    record = folder.records().get(name)
    return record is not None and record.pid == pid


def test_a_restart_by_hand_ends_the_env_server_its_killed_start_left(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "fleet")
    processes = Processes(tmp_path / "logs")
    try:
        first = processes.start("first", node_command(folder, "n1"))
        wait_for(lambda: _published_by(folder, "n1", first.pid), backstop(60), "n1 up")
        [server] = psutil.Process(first.pid).children()
        orphan = server.pid

        os.kill(first.pid, signal.SIGKILL)  # the node only, not its process group
        first.wait(backstop(30))
        assert _alive(orphan), "the killed node's env server runs on (the defect's premise)"

        second = processes.start("second", node_command(folder, "n1"))
        wait_for(lambda: _published_by(folder, "n1", second.pid), backstop(60), "n1 up again")

        assert not _alive(orphan), "the new start published its record with the old env server still running"
        assert [p.ppid() for p in _env_servers(folder, "n1")] == [second.pid], "one env server: the new start's"
        assert f"ended the previous start's env server (pid {orphan})" in processes.log("second")
    finally:
        processes.stop_all()
        _end(_env_servers(folder, "n1"))
        remove_private(folder)


def test_an_env_server_ends_itself_when_its_node_is_killed(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "fleet")
    processes = Processes(tmp_path / "logs")
    command = node_command(folder, "n1", "--no-docker", "--server-command", shlex.join(WATCHING_STUB), stub=False)
    try:
        node = processes.start("node", command)
        wait_for(lambda: _published_by(folder, "n1", node.pid), backstop(60), "n1 up")
        [server] = psutil.Process(node.pid).children()

        os.kill(node.pid, signal.SIGKILL)  # the node only, not its process group
        node.wait(backstop(30))

        wait_for(lambda: not _alive(server.pid), backstop(30), "the env server to end with its node")
    finally:
        processes.stop_all()
        _end(_env_servers(folder, "n1"))
        remove_private(folder)


def test_a_record_of_a_reused_pid_another_host_or_garbage_ends_nothing(tmp_path: Path, caplog) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        record_start(private, {"env server": bystander.pid})
        record = json.loads((private / RECORD_NAME).read_text())
        assert (private / RECORD_NAME).stat().st_mode & 0o777 == 0o600

        for changed in (
            {"processes": {"env server": {"pid": bystander.pid, "create_time": 1.0}}},  # the pid, reused
            {"host": "elsewhere"},
            {"uid": os.getuid() + 1},
        ):
            (private / RECORD_NAME).write_text(json.dumps({**record, **changed}))
            assert end_previous_start(private) == []
        (private / RECORD_NAME).write_text("{not json")
        assert end_previous_start(private) == []
        assert bystander.poll() is None, "a process the record does not prove ours was ended"
        assert "malformed" in caplog.text and "not this user's on this host" in caplog.text

        (private / RECORD_NAME).write_text(json.dumps(record))
        assert end_previous_start(private) == [f"env server (pid {bystander.pid})"]
        assert not _alive(bystander.pid)
    finally:
        bystander.kill()
        bystander.wait()


@pytest.mark.xdist_group("one_at_a_time")  # it starts a Docker engine per Slurm node, like the others there
@pytest.mark.timeout(backstop(120))
def test_a_step_killed_by_hand_under_slurm_restarts_without_its_orphan(
    new_slurm_cluster: Callable[..., SlurmCluster], tmp_path: Path
) -> None:
    cluster = new_slurm_cluster(nodes=1)
    folder = make_folder(tmp_path / "fleet")
    node_args = f"--host 127.0.0.1 --bind 127.0.0.1 --no-docker --server-command {shlex.quote(' '.join(STUB))}"
    submit = [sys.executable, "-m", "air.cli.main", "fleet", "submit", str(folder.root), "--nodes", "1",
              "--restart-delay", "1", "--node-args", node_args]  # fmt: skip
    env = {**cluster.env, "PYTHONPATH": str(ROOT)}
    env = {key: value for key, value in env.items() if not key.startswith("AIR_")}
    done = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=backstop(60), cwd=ROOT)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip().rsplit(" ", 1)[-1]
    try:
        first = wait_for(lambda: folder.records().get("n1"), backstop(120), "n1 up as a job step")
        step = cluster.env_node_steps(job)["n1"]
        [server] = psutil.Process(first.pid).children()
        orphan = server.pid

        os.kill(first.pid, signal.SIGKILL)  # the step's node process only, as a user or the OOM killer might

        second = wait_for(
            lambda: (record := folder.records().get("n1")) and record.pid != first.pid and record,
            backstop(120),
            "n1 up again in a new step",
        )
        assert cluster.env_node_steps(job)["n1"] != step, "the job's loop started the node as a new step"
        assert not _alive(orphan), "the new start published its record with the old env server still running"
        assert [p.ppid() for p in _env_servers(folder, "n1")] == [second.pid], "one env server: the new start's"
        job_log = (folder.root / "logs" / f"slurm-{job}.out").read_text(errors="replace")
        assert f"ended the previous start's env server (pid {orphan})" in job_log, "it outlived its step"
    finally:
        cluster.run("scancel", job, check=False)
        wait_for(lambda: not cluster.run("squeue", "-h", check=False).stdout.strip(), backstop(60), "the job to end")
        _end(_env_servers(folder, "n1"))  # an orphan escapes scancel too (proctrack/linuxproc)
        remove_private(folder)
