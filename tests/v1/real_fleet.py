"""A fleet of real env nodes for the v1 tests: air_mlgym's v1 env server (laneMerge, real containers) behind
each node's gate, a spreader in front, verifiers' own EnvClient asking for episodes as prime-rl's orchestrator
does, against a scripted policy (``sleep 5``, ``validate``, ``submit``)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import verifiers.v1 as vf
from verifiers.v1.configs.client import EvalClientConfig
from verifiers.v1.serve import EnvClient
from verifiers.v1.utils import loaders

from air.serving.server import PolicyServer
from rigs.fleet import (
    Processes,
    figures,
    free_port,
    make_folder,
    node_command,
    remove_private,
    spread_command,
    wait_for,
)
from rigs.patience import backstop

LOST_AFTER, PROBE = 4.0, 0.5
BOUND = LOST_AFTER + 2 * PROBE
POOL = 2


@contextmanager
def real_fleet(tmp_path: Path, image: str, nodes: dict[str, dict[str, str]], capacity: int) -> Iterator[tuple]:
    """Nodes (name -> extra environment, e.g. another DOCKER_HOST), a spreader, and a play(coroutine) that runs
    it with verifiers' EnvClient and a scripted policy; yields (folder, processes, run_id, play)."""
    run_id = f"pytest-faults-{os.getpid()}-{tmp_path.name}"
    taskset = {
        "id": "air_mlgym", "task_configs": ["laneMerge"], "max_turns": 6, "image": image, "run_id": run_id,
        "pool_size": POOL, "engine_wait": 20, "trajectory_dir": str(tmp_path / "trajectories"),
    }  # fmt: skip
    folder = make_folder(tmp_path / "fleet", {"taskset": taskset})
    processes = Processes(tmp_path / "logs")
    address = f"tcp://127.0.0.1:{free_port()}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["sleep 5", "validate", "submit"]))
    tasks = list(loaders.load_taskset(loaders.taskset_config_type("air_mlgym")(**taskset)))
    try:
        for name, env in nodes.items():
            command = node_command(folder, name, "--capacity", str(capacity), stub=False)
            processes.start(name, command, {"AIR_TEST_KEY": "x", **env})
        fast = ("--lost-after", str(LOST_AFTER), "--probe-interval", str(PROBE))
        processes.start("spreader", spread_command(folder, address, *fast))
        wait_for(lambda: all_up(folder, len(nodes)), backstop(180), "the nodes up")
        with PolicyServer(f"script:{script}") as server:
            client_config = EvalClientConfig(base_url=server.base_url, api_key_var="AIR_TEST_KEY")

            def play(scenario):
                async def with_client():
                    client = EnvClient(address)

                    async def episode(index: int):
                        task_data = tasks[index % len(tasks)].data.model_dump(mode="json")
                        return await client.run(client_config, "scripted", vf.SamplingConfig(), task_data)

                    try:
                        await client.wait_for_server_startup(timeout=60)
                        return await scenario(episode)
                    finally:
                        await client.close()

                return asyncio.run(with_client())

            yield folder, processes, run_id, play
    finally:
        processes.stop_all()
        remove_private(folder)


def all_up(folder, count: int) -> bool:
    found = figures(folder).get("nodes", {})
    return len(found) == count and all(node["state"] == "up" for node in found.values())


def nodes(folder) -> dict:
    return figures(folder).get("nodes", {})
