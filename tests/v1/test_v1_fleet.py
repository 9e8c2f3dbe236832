"""One source over two env nodes, for real: air_mlgym's v1 env server on each node (real containers, n1 on
this host's engine, n2 on a second one), each behind its gate, the spreader in front, and verifiers' own
EnvClient asking for episodes as prime-rl's orchestrator does. Mid-episode n2 dies with its engine (its
processes killed as a cancelled Slurm step's are, its dockerd stopped): its episodes fail within the bound
and only those; n1's finish; started again, n2 removes what its last start left and rejoins; nothing is left
on either engine."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from rigs.fleet import containers, node_command, outcomes
from tests.second_engine import SecondEngine

pytest.importorskip("verifiers.v1")
from tests.v1.real_fleet import BOUND, POOL, nodes, real_fleet  # noqa: E402


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_a_node_lost_with_its_engine_costs_only_its_own_episodes(
    docker_image: str, second_engine: SecondEngine, tmp_path: Path
) -> None:
    second_engine.start()
    n2_engine = {"DOCKER_HOST": second_engine.address}
    with real_fleet(tmp_path, docker_image, {"n1": {}, "n2": n2_engine}, capacity=POOL) as fleet:
        folder, processes, run_id, play = fleet

        async def scenario(episode):
            warm = await asyncio.gather(*(episode(i) for i in range(4)))
            running = [asyncio.create_task(episode(i)) for i in range(4)]
            while not all(node["running"] >= 1 for node in nodes(folder).values()):
                await asyncio.sleep(0.1)
            await asyncio.sleep(2.0)  # each node's agents in their `sleep 5`
            processes.kill("n2")  # its gate and env server, as a cancelled Slurm step ends
            await asyncio.to_thread(second_engine.stop)  # and its Docker engine
            killed = time.monotonic()
            ended = await outcomes(running, killed)
            await asyncio.to_thread(second_engine.start)
            killed_start = folder.records()["n2"].incarnation  # its record outlives a SIGKILL
            again = node_command(folder, "n2", "--capacity", str(POOL), stub=False)
            processes.start("n2-again", again, {"AIR_TEST_KEY": "x", **n2_engine})
            while folder.records().get("n2") is None or folder.records()["n2"].incarnation == killed_start:
                await asyncio.sleep(0.2)
            while nodes(folder)["n2"]["state"] != "up":
                await asyncio.sleep(0.2)
            after = await asyncio.gather(*(episode(i) for i in range(4)))
            return warm, ended, after

        warm, ended, after = play(scenario)
        processes.stop("spreader")
        for name in ("n1", "n2-again"):
            processes.stop(name, timeout=120)

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
