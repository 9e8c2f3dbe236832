"""Root's keep-alive kills the agent's processes when the engine signals it: no process has to start in the
container, which a fork bomb holding every pid refuses to root's own exec ("read init-p", stop 65's CI)."""

from __future__ import annotations

import time

import docker
import pytest

from air.sandbox.config import SandboxConfig
from air.sandbox.container import container_kwargs
from air.sandbox.keep_alive import TOP_ARGS, free_the_agents_pids, freed_rounds
from air.sandbox.root_side import as_user_argv
from rigs.patience import backstop

BOMB = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass"
TITLES = ["PID", "PPID", "UID", "COMMAND"]


def test_only_the_inits_child_running_as_root_counts() -> None:
    rows = [
        ["100", "90", "0", "docker-init"],
        ["101", "100", "0", "air-freed-2"],
        ["102", "100", "1000", "air-freed-99"],  # the agent's, named like it and reparented to the init
        ["103", "80", "1000", "air-freed-98"],  # an exec of the agent's
    ]
    assert freed_rounds({"Titles": TITLES, "Processes": rows}, 100) == 2
    assert freed_rounds({"Titles": TITLES, "Processes": rows[2:]}, 100) is None  # no init: no keep-alive to ask
    assert freed_rounds({"Titles": TITLES, "Processes": [rows[0], rows[2]]}, 100) is None


def _pids(container) -> dict:
    return container.stats(stream=False, one_shot=True)["pids_stats"]


@pytest.mark.timeout(300)
def test_the_keep_alive_frees_a_container_a_fork_bomb_fills(docker_image: str) -> None:
    config = SandboxConfig(
        image=docker_image, run_id="pytest", pids_limit=32, cpus=1.0, memory="1g", tmp_size="512m", disk=""
    )
    container = docker.from_env().containers.run(**container_kwargs(config, {"air.test": "1"}))
    try:
        for round_ in (1, 2):  # and again: the trap stays set
            container.exec_run(as_user_argv(config.user, ["python3", "-c", BOMB]), user="root", detach=True)
            deadline = time.monotonic() + backstop(30)
            while _pids(container)["current"] < 32 and time.monotonic() < deadline:
                time.sleep(0.2)
            assert _pids(container)["current"] == 32, _pids(container)
            assert free_the_agents_pids(container, round_)
            container.reload()
            top = container.top(ps_args=TOP_ARGS)
            assert container.status == "running"
            assert freed_rounds(top, container.attrs["State"]["Pid"]) == round_
            assert not [row for row in top["Processes"] if row[2] != "0"], top  # nothing of the agent's left
            assert _pids(container)["current"] <= 3  # docker-init, the keep-alive, its sleep
    finally:
        container.remove(force=True)


@pytest.mark.timeout(120)
def test_a_container_made_otherwise_is_never_signalled(docker_image: str) -> None:
    # Its init's child would end of SIGUSR1, and the container with it (a mask, the host's proof).
    client = docker.from_env()
    container = client.containers.run(
        docker_image, ["sleep", "60"], detach=True, init=True, network_mode="none", labels={"air.test": "1"}
    )
    try:
        assert not free_the_agents_pids(container, 1)
        container.reload()
        assert container.status == "running"
    finally:
        container.remove(force=True)
