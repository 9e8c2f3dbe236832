"""One source over two env nodes, for real: air_mlgym's v1 env server on each node (real containers, n1 on
this host's engine, n2 on a second one), each behind its gate, the spreader in front, and verifiers' own
EnvClient asking for episodes as prime-rl's orchestrator does. Mid-episode n2 dies with its engine (its
processes killed as a cancelled Slurm step's are, its dockerd stopped): its episodes fail within the bound
and only those; n1's finish; started again, n2 removes what its last start left and rejoins; nothing is left
on either engine."""

from __future__ import annotations

import asyncio
import json
import os
import time
from pathlib import Path

import pytest

from air.serving.server import PolicyServer
from rigs.fleet import (
    Processes,
    containers,
    figures,
    free_port,
    make_folder,
    node_command,
    outcomes,
    remove_private,
    spread_command,
    wait_for,
)
from rigs.patience import backstop
from tests.second_engine import SecondEngine

vf = pytest.importorskip("verifiers.v1")
from verifiers.v1.configs.client import EvalClientConfig  # noqa: E402
from verifiers.v1.serve import EnvClient  # noqa: E402
from verifiers.v1.utils import loaders  # noqa: E402

LOST_AFTER, PROBE = 4.0, 0.5
BOUND = LOST_AFTER + 2 * PROBE


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_a_node_lost_with_its_engine_costs_only_its_own_episodes(
    docker_image: str, second_engine: SecondEngine, tmp_path: Path
) -> None:
    second_engine.start()
    run_id = f"pytest-fleet-{os.getpid()}-{tmp_path.name}"
    taskset = {
        "id": "air_mlgym", "task_configs": ["laneMerge"], "max_turns": 6, "image": docker_image, "run_id": run_id,
        "pool_size": 2, "engine_wait": 20, "trajectory_dir": str(tmp_path / "trajectories"),
    }  # fmt: skip
    folder = make_folder(tmp_path / "fleet", {"taskset": taskset})
    processes = Processes(tmp_path / "logs")
    address = f"tcp://127.0.0.1:{free_port()}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["sleep 5", "validate", "submit"]))
    n2_engine = {"DOCKER_HOST": second_engine.address}
    tasks = list(loaders.load_taskset(loaders.taskset_config_type("air_mlgym")(**taskset)))
    try:
        processes.start("n1", node_command(folder, "n1", stub=False), {"AIR_TEST_KEY": "x"})
        processes.start("n2", node_command(folder, "n2", stub=False), {"AIR_TEST_KEY": "x", **n2_engine})
        processes.start("spreader", spread_command(folder, address, "--lost-after", str(LOST_AFTER),
                                                   "--probe-interval", str(PROBE)))  # fmt: skip
        nodes = lambda: figures(folder).get("nodes", {})  # noqa: E731
        wait_for(
            lambda: len(nodes()) == 2 and all(n["state"] == "up" for n in nodes().values()),
            backstop(180),
            "both nodes up",
        )

        with PolicyServer(f"script:{script}") as server:
            client_config = EvalClientConfig(base_url=server.base_url, api_key_var="AIR_TEST_KEY")

            async def episode(client: EnvClient, index: int):
                task_data = tasks[index % len(tasks)].data.model_dump(mode="json")
                return await client.run(client_config, "scripted", vf.SamplingConfig(), task_data)

            async def play():
                client = EnvClient(address)
                try:
                    await client.wait_for_server_startup(timeout=60)
                    warm = await asyncio.gather(*(episode(client, i) for i in range(4)))
                    running = [asyncio.create_task(episode(client, i)) for i in range(4)]
                    while not all(node["running"] >= 1 for node in nodes().values()):
                        await asyncio.sleep(0.1)
                    await asyncio.sleep(2.0)  # each node's agents in their `sleep 5`
                    processes.kill("n2")  # its gate and env server, as a cancelled Slurm step ends
                    await asyncio.to_thread(second_engine.stop)  # and its Docker engine
                    killed = time.monotonic()
                    ended = await outcomes(running, killed)
                    await asyncio.to_thread(second_engine.start)
                    killed_start = folder.records()["n2"].incarnation  # its record outlives a SIGKILL
                    processes.start(
                        "n2-again", node_command(folder, "n2", stub=False), {"AIR_TEST_KEY": "x", **n2_engine}
                    )
                    while folder.records().get("n2") is None or folder.records()["n2"].incarnation == killed_start:
                        await asyncio.sleep(0.2)
                    while nodes()["n2"]["state"] != "up":
                        await asyncio.sleep(0.2)
                    after = await asyncio.gather(*(episode(client, i) for i in range(4)))
                    return warm, ended, after
                finally:
                    await client.close()

            warm, ended, after = asyncio.run(play())
        processes.stop("spreader")
        for name in ("n1", "n2-again"):
            processes.stop(name, timeout=120)
    finally:
        processes.stop_all()
        remove_private(folder)

    def node_of(episode) -> str:
        (trace,) = episode.traces
        return trace.info["env_node"]

    assert {node_of(e) for e in warm} == {"n1", "n2"} and all(e.ok for e in warm)
    failed = [(what, seconds) for kind, what, seconds in ended if kind == "failed"]
    done = [episode for kind, episode, _ in ended if kind == "ok"]
    assert failed and all("env node n2 lost" in what for what, _ in failed), ended
    assert max(seconds for _, seconds in failed) < BOUND + 3, f"n2's episodes failed {failed}"
    assert done and all(node_of(e) == "n1" and e.ok for e in done), "n1's episodes finish"
    assert {node_of(e) for e in after} == {"n1", "n2"}, "n2 rejoined after its start"
    assert containers(None, f"{run_id}-n1") == [] and containers(second_engine.address, f"{run_id}-n2") == []
    assert "removed" in processes.log("n2-again"), "the new start removed what the killed one left"
