"""The plan behind ``air clean``: real containers with our labels, real recorded process trees."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import docker
import docker.errors
import psutil
import pytest

from air.launch.cleanup import execute_clean, plan_clean
from air.launch.process_control import same_process
from air.launch.process_records import load_records, record_launch
from air.sandbox.config import LABEL, LABEL_HOST, LABEL_PID, LABEL_RUN, LABEL_STARTED, SandboxConfig
from air.sandbox.container import container_kwargs

# A root that starts `sleep 300`, prints its pid and start time, and exits when its stdin closes.
ROOT = textwrap.dedent(
    """
    import subprocess, sys
    import psutil
    q = subprocess.DEVNULL
    member = subprocess.Popen(["sleep", "300"], stdin=q, stdout=q, stderr=q)
    print(member.pid, psutil.Process(member.pid).create_time(), flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def tree() -> Iterator[tuple[subprocess.Popen[str], int, float]]:
    """A running root (new session) and its `sleep` member; teardown stops both if still there."""
    root = subprocess.Popen(
        [sys.executable, "-c", ROOT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert root.stdout is not None
    pid, create_time = root.stdout.readline().split()
    try:
        yield root, int(pid), float(create_time)
    finally:
        if root.poll() is None:
            root.kill()
        root.wait()
        leftover = same_process(int(pid), float(create_time), os.getuid())
        if leftover is not None:
            leftover.kill()


def test_a_live_run_is_skipped_unless_asked(tree) -> None:
    root, member_pid, _ = tree
    record = record_launch(root.pid, "rl", ["rl"], cwd="/")

    plan = plan_clean()
    assert [p for p in plan.processes if p.run_id == record.run_id] == []
    assert any(record.run_id in line and "still running" in line for line in plan.skipped_running)

    plan = plan_clean(include_running=True)
    assert {p.pid for p in plan.processes if p.run_id == record.run_id} == {root.pid, member_pid}
    assert all(p.root_alive for p in plan.processes)


def test_leftovers_of_a_finished_run_are_planned_and_stopped(tree) -> None:
    root, member_pid, member_created = tree
    record = record_launch(root.pid, "rl", ["rl"], cwd="/")
    root.stdin.close()  # the root exits; its `sleep` lives on
    root.wait()

    plan = plan_clean()
    assert [(p.run_id, p.pid, p.root_alive) for p in plan.processes] == [(record.run_id, member_pid, False)]
    assert "sleep 300" in plan.processes[0].command
    assert all(record.run_id not in line for line in plan.skipped_running)

    report = execute_clean(replace(plan, containers=[]), grace=5)  # containers: not this test's business
    assert [(o.pid, o.outcome) for o in report.processes] == [(member_pid, "terminated")]
    assert same_process(member_pid, member_created, os.getuid()) is None
    assert report.forgotten_records == [record.run_id]
    assert load_records() == ([], [])


def test_records_with_nothing_alive_are_tidied_and_bad_files_listed(air_state_dir: Path) -> None:
    short = subprocess.Popen([sys.executable, "-c", "pass"], start_new_session=True)
    record = record_launch(short.pid, "rl", ["rl"], cwd="/")
    short.wait()
    (air_state_dir / "processes" / "garbage.json").write_text("[]")

    plan = plan_clean()
    assert plan.processes == []
    assert [r.run_id for r in plan.records] == [record.run_id]
    assert [path.name for path, _ in plan.unreadable_records] == ["garbage.json"]

    report = execute_clean(replace(plan, containers=[]))
    assert report.forgotten_records == [record.run_id]
    assert not record.path.exists()
    assert (air_state_dir / "processes" / "garbage.json").exists()  # unreadable files are reported, never deleted


def _labels(run_id: str, pid: int, started: float) -> dict[str, str]:
    return {
        LABEL: "1",
        LABEL_RUN: run_id,
        LABEL_HOST: socket.gethostname(),
        LABEL_PID: str(pid),
        LABEL_STARTED: f"{started:.3f}",
    }


@pytest.mark.docker
def test_containers_of_dead_owners_are_planned_and_removed(docker_image: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # A host name of the test's own: under the real one, any pool starting on this host (another suite's,
    # another run's) reaps the orphan first, and this test's plan would take in theirs.
    monkeypatch.setattr(socket, "gethostname", lambda: f"pytest-clean-{os.getpid()}")
    client = docker.from_env()
    config = SandboxConfig(
        image=docker_image, run_id="pytest-clean", ttl_s=300, cpus=0.5, memory="256m", tmp_size="64m", shm_size="32m"
    )
    dead_owner = subprocess.Popen([sys.executable, "-c", "pass"])
    dead_started = psutil.Process(dead_owner.pid).create_time()
    dead_owner.wait()
    me = psutil.Process()
    run_id = f"pytest-clean-{os.getpid()}"
    orphan = client.containers.run(**container_kwargs(config, _labels(run_id, dead_owner.pid, dead_started)))
    owned = client.containers.run(**container_kwargs(config, _labels(run_id, me.pid, me.create_time())))
    try:
        plan = plan_clean()
        assert plan.docker_error is None
        planned = {c.id: c for c in plan.containers}
        assert orphan.id in planned and owned.id not in planned
        assert planned[orphan.id].owner_pid == dead_owner.pid and not planned[orphan.id].owner_alive
        assert any(f"live process {me.pid}" in line and run_id in line for line in plan.skipped_running)

        # Act on this test's containers only: others on this host belong to concurrent runs.
        mine = replace(plan, containers=[c for c in plan.containers if c.run_id == run_id], processes=[])
        report = execute_clean(mine)
        assert [(item.id, outcome) for item, outcome in report.containers] == [(orphan.id, "removed")]
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(orphan.id)
        assert client.containers.get(owned.id).status == "running"
    finally:
        for container in (orphan, owned):
            try:
                container.remove(force=True)
            except docker.errors.NotFound:
                pass


def test_an_unreachable_docker_still_plans_processes(tree, monkeypatch: pytest.MonkeyPatch) -> None:
    import air.sandbox.container

    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    monkeypatch.setattr(air.sandbox.container, "_client", None)  # the shared client would still answer
    root, member_pid, _ = tree
    record_launch(root.pid, "rl", ["rl"], cwd="/")
    root.stdin.close()
    root.wait()
    plan = plan_clean()
    assert plan.docker_error and "docker" in plan.docker_error.lower()
    assert plan.containers == []
    assert [p.pid for p in plan.processes] == [member_pid]
