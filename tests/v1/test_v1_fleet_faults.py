"""Faults of the fleet, for real: air_mlgym's v1 env server on each node (laneMerge, real containers), the
spreader in front, verifiers' own EnvClient asking for episodes as prime-rl's orchestrator does.

- A node whose Docker engine dies gets no new episode: its gate says so before the end of the episodes the
  dead engine ended reaches the spreader, so the room they free is never offered (the episodes queued behind
  go to the healthy node).
- The spreader killed mid-run: its episodes in flight are answered as failed at once by the relay that holds
  the address, a new spreader serves the next ones, and the node cancels the abandoned runs, so the containers
  beyond its warm pool go within the bound.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from rigs.fleet import containers, figures, outcomes, wait_for
from rigs.patience import backstop
from tests.second_engine import SecondEngine

pytest.importorskip("verifiers.v1")
from tests.v1.real_fleet import BOUND, POOL, all_up, nodes, real_fleet  # noqa: E402


def _sent(node: dict) -> int:
    """Episodes sent to a node so far: answered, failed by a loss, or running (the spreader's own figures)."""
    return node["done"] + node["failed"] + node["running"]


async def _running(folder, wanted: dict[str, int]) -> None:
    while any(nodes(folder).get(name, {}).get("running", 0) < count for name, count in wanted.items()):
        await asyncio.sleep(0.1)


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_a_node_whose_engine_died_gets_no_new_episode(
    docker_image: str, second_engine: SecondEngine, tmp_path: Path
) -> None:
    second_engine.start()
    n2_engine = {"DOCKER_HOST": second_engine.address}
    with real_fleet(tmp_path, docker_image, {"n1": {}, "n2": n2_engine}, capacity=POOL) as (folder, _p, _run, play):

        async def scenario(episode):
            running = [asyncio.create_task(episode(i)) for i in range(6)]  # two on each node, two waiting
            await _running(folder, {"n1": POOL, "n2": POOL})
            await asyncio.sleep(1.5)  # the agents in their `sleep 5`: nothing ends for a while
            sent_before = _sent(nodes(folder)["n2"])
            os.kill(int((second_engine.folder / "docker.pid").read_text()), signal.SIGKILL)  # the engine dies
            died = time.monotonic()
            return sent_before, await outcomes(running, died)

        sent_before, ended = play(scenario)
        node = nodes(folder)["n2"]
    second_engine.stop()
    ran_on = [what.traces[0].info.get("env_node") for kind, what, _ in ended if kind == "ok" and what.traces]
    lost = [round(seconds, 2) for kind, what, seconds in ended if kind == "failed" or not what.ok]
    figures_line = {"fault": "engine died", "in_flight_on_node": sent_before, "sent_after": _sent(node) - sent_before,
                    "episodes_lost": len(lost), "answered_s": lost, "state": node["state"]}  # fmt: skip
    print("FAULT-FIGURES " + json.dumps(figures_line))  # benchmarks/fleet_faults.py reads it
    assert sent_before == POOL
    assert _sent(node) == POOL, f"{_sent(node) - POOL} new episodes went to n2 after its engine died"
    assert node["state"] in ("sick", "lost"), node
    assert ran_on.count("n1") >= 4, f"the queued episodes ran on n1: {ran_on}"


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_a_killed_spreaders_episodes_are_answered_and_its_containers_go(docker_image: str, tmp_path: Path) -> None:
    capacity = 4  # two containers beyond the warm pool while four run
    with real_fleet(tmp_path, docker_image, {"n1": {}}, capacity=capacity) as (folder, processes, run_id, play):

        def running_containers() -> int:
            return len(containers(None, f"{run_id}-n1"))

        async def scenario(episode):
            warm = await asyncio.gather(*(episode(i) for i in range(2)))
            running = [asyncio.create_task(episode(i)) for i in range(capacity)]
            await _running(folder, {"n1": capacity})
            await asyncio.sleep(1.5)
            peak = await asyncio.to_thread(running_containers)
            relay = psutil.Process(processes.started["spreader"].pid)
            (relay.children() or [relay])[0].kill()  # the spreader (4914253: the one process, no relay)
            killed = time.monotonic()
            ended = await asyncio.wait_for(outcomes(running, killed), backstop(60))
            while (left := await asyncio.to_thread(running_containers)) > POOL:
                await asyncio.sleep(0.25)
            back_to_pool = time.monotonic() - killed
            wait_for(lambda: figures(folder).get("spreader_starts") == 2 and all_up(folder, 1), backstop(60),
                     "the new spreader with n1 up")  # fmt: skip
            after = await episode(0)
            return warm, peak, ended, left, back_to_pool, after

        warm, peak, ended, left, back_to_pool, after = play(scenario)
    answered = [round(seconds, 4) for kind, _what, seconds in ended if kind == "failed"]
    figures_line = {"fault": "spreader killed (real env)", "in_flight": capacity, "episodes_lost": len(answered),
                    "answered_s": answered, "containers_peak": peak,
                    "containers_back_to_pool_s": round(back_to_pool, 1)}  # fmt: skip
    print("FAULT-FIGURES " + json.dumps(figures_line))  # benchmarks/fleet_faults.py reads it
    assert all(e.ok for e in warm) and after.ok
    assert peak > POOL, f"{peak} containers while {capacity} episodes ran"
    failed = [(what, seconds) for kind, what, seconds in ended if kind == "failed"]
    assert len(failed) == capacity and all("the spreader died" in what for what, _ in failed), ended
    assert max(seconds for _, seconds in failed) < 2.0, f"answered {failed}"
    assert back_to_pool < BOUND + 15, f"containers beyond the pool went {back_to_pool:.1f} s after the kill"
