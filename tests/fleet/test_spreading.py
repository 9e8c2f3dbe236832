"""One source over many env nodes, for real on loopback: `air fleet node` processes (gate + a stand-in env
server speaking verifiers' wire), `air fleet spread`, and a client on verifiers' wire. What the spreader
promises: least busy first within each node's capacity, a lost node's episodes failed within the bound and
only those, a node back rejoins (the runs given up cancelled there), a restarted node is a new one, and
both generations of the wire pass."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections import Counter
from pathlib import Path

import psutil
import pytest

from rigs.fleet import (
    Processes,
    WireClient,
    figures,
    fleet,
    free_port,
    make_folder,
    node_command,
    remove_private,
    spread_command,
    wait_for,
)
from rigs.patience import backstop

LOST_AFTER, PROBE = 2.0, 0.25
FAST = ("--lost-after", str(LOST_AFTER), "--probe-interval", str(PROBE))
BOUND = LOST_AFTER + 2 * PROBE


def _run(coroutine):
    return asyncio.run(coroutine)


def test_episodes_go_to_the_least_busy_node_within_its_capacity(tmp_path: Path) -> None:
    with fleet(tmp_path, 2, capacity=2, spread_args=FAST) as (_folder, _processes, address):

        async def play() -> list[dict]:
            client = WireClient(address)
            try:
                return await asyncio.gather(*(client.run(0.6, i=i) for i in range(8)))
            finally:
                await client.close()

        replies = _run(play())
    episodes = [reply["episode"] for reply in replies]
    assert all(reply["success"] for reply in replies)
    assert Counter(episode["server"] for episode in episodes) == {"n1": 4, "n2": 4}
    for server in ("n1", "n2"):  # never more than its capacity at once on a node: two waves of two
        spans = sorted((e["started"], e["ended"]) for e in episodes if e["server"] == server)
        at_once = max(sum(1 for s, e in spans if s <= start < e) for start, _ in spans)
        assert at_once == 2, spans


def test_a_frozen_node_fails_only_its_own_episodes_within_the_bound(tmp_path: Path) -> None:
    with fleet(tmp_path, 2, capacity=4, spread_args=FAST) as (folder, processes, address):

        async def play() -> tuple[list[dict], list[float], list[dict], list[dict]]:
            client = WireClient(address)
            try:
                started = [asyncio.create_task(client.run(8.0, i=i)) for i in range(6)]
                await asyncio.sleep(0.8)  # all six running, three on each node (room for one more on each)
                os.kill(processes.started["n1"].pid, signal.SIGSTOP)  # n1 stops answering, its server lives on
                frozen = time.monotonic()
                answered_at: list[float] = []
                for task in started:
                    task.add_done_callback(lambda _: answered_at.append(time.monotonic() - frozen))
                while len(answered_at) < 3:  # n1's three fail; n2's go on
                    await asyncio.sleep(0.05)
                meanwhile = await asyncio.gather(*(client.run(0.1, i=i) for i in range(3)))
                os.kill(processes.started["n1"].pid, signal.SIGCONT)
                while figures(folder)["nodes"]["n1"]["state"] != "up":
                    await asyncio.sleep(0.05)
                after = await asyncio.gather(*(client.run(0.3, i=i) for i in range(8)))
                first = await asyncio.gather(*started)
                return first, answered_at, meanwhile, after
            finally:
                await client.close()

        first, answered_at, meanwhile, after = _run(play())
        node = figures(folder)["nodes"]["n1"]
        server_log = (folder.logs("n1") / "env-server.log").read_text()
    failed = [reply for reply in first if not reply["success"]]
    assert len(failed) == 3 and all(reply["episode"]["server"] == "n2" for reply in first if reply["success"])
    assert all(re.match(r"env node n1 lost \(no answer for [\d.]+ s\)", reply["error"]) for reply in failed), failed
    assert max(sorted(answered_at)[:3]) < BOUND + 1.0, f"n1's failed {sorted(answered_at)[:3]} s after the freeze"
    assert {reply["episode"]["server"] for reply in meanwhile} == {"n2"}, "nothing new goes to a lost node"
    assert {reply["episode"]["server"] for reply in after} == {"n1", "n2"}, "the node rejoined"
    assert node["losses"] == 1 and node["failed"] == 3
    cancelled = re.findall(r"^cancel (\w+) running$", server_log, re.M)
    assert len(cancelled) == 3, "the runs given up were cancelled on the node when it answered again"


def test_a_killed_node_started_again_joins_as_a_new_one(tmp_path: Path) -> None:
    with fleet(tmp_path, 2, capacity=2, spread_args=FAST) as (folder, processes, address):
        old = folder.records()["n1"]

        async def play() -> tuple[list[dict], list[dict]]:
            client = WireClient(address)
            try:
                running = [asyncio.create_task(client.run(8.0, i=i)) for i in range(4)]
                await asyncio.sleep(0.8)
                processes.kill("n1")  # the node and its env server, as a cancelled Slurm step ends
                first = await asyncio.gather(*running)
                processes.start("n1-again", node_command(folder, "n1", "--capacity", "2"), {"STUB_NAME": "n1-again"})
                wait_for(
                    lambda: folder.records().get("n1", old).incarnation != old.incarnation,
                    backstop(60),
                    "n1's new start",
                )
                wait_for(lambda: figures(folder)["nodes"]["n1"]["state"] == "up", backstop(30), "the new n1 up")
                return first, await asyncio.gather(*(client.run(0.4, i=i) for i in range(4)))
            finally:
                await client.close()

        first, after = _run(play())
    assert Counter(reply["success"] for reply in first) == {True: 2, False: 2}
    assert {reply["episode"]["server"] for reply in after} == {"n1-again", "n2"}


@pytest.mark.parametrize("wire", ["two", "three"])
def test_both_generations_of_the_wire_pass_and_fail_in_their_own_framing(tmp_path: Path, wire: str) -> None:
    with fleet(tmp_path, 1, capacity=2, spread_args=FAST, wire=wire) as (_folder, processes, address):

        async def play() -> tuple[bool, dict, dict]:
            client = WireClient(address, three=wire == "three")
            try:
                healthy = await client.healthy()
                done = await client.run(0.1, i=0)
                pending = asyncio.create_task(client.run(10.0, i=1))
                await asyncio.sleep(0.5)
                processes.kill("n1")
                return healthy, done, await asyncio.wait_for(pending, BOUND + 5)
            finally:
                await client.close()

        healthy, done, lost = _run(play())
    assert healthy and done["success"] and done["episode"]["server"] == "n1"
    assert not lost["success"] and "env node n1 lost" in lost["error"]


def test_without_a_node_health_goes_unanswered_and_episodes_wait_for_one(tmp_path: Path) -> None:
    folder = make_folder(tmp_path / "fleet")
    processes = Processes(tmp_path / "logs")
    address = f"tcp://127.0.0.1:{free_port()}"
    try:
        processes.start("spreader", spread_command(folder, address, *FAST))

        async def play() -> tuple[bool, dict]:
            client = WireClient(address)
            try:
                await asyncio.sleep(0.5)
                healthy = await client.healthy(timeout=1.0)
                waiting = asyncio.create_task(client.run(0.1, i=0))
                await asyncio.sleep(1.0)
                assert not waiting.done()
                processes.start("n1", node_command(folder, "n1"), {"STUB_NAME": "n1"})
                return healthy, await asyncio.wait_for(waiting, backstop(60))
            finally:
                await client.close()

        healthy, reply = _run(play())
    finally:
        processes.stop_all()
        remove_private(folder)
    assert not healthy, "no node up: the orchestrator's start-up poll must keep waiting"
    assert reply["success"] and reply["episode"]["server"] == "n1"


def test_a_node_whose_env_server_stops_answering_is_sick_then_lost_and_back(tmp_path: Path) -> None:
    lost_after = 8.0  # long enough to see the node sick (two missed health checks, ~3 s) before it is lost
    spread = ("--lost-after", str(lost_after), "--probe-interval", str(PROBE))
    with fleet(tmp_path, 2, capacity=4, spread_args=spread) as (folder, processes, address):
        server = wait_for(lambda: psutil.Process(processes.started["n1"].pid).children(), backstop(30), "n1's server")

        async def play() -> tuple[list[dict], list[str], dict, list[dict]]:
            client = WireClient(address)
            try:
                running = [asyncio.create_task(client.run(30.0, i=i)) for i in range(2)]  # one on each node
                while min(node["running"] for node in figures(folder)["nodes"].values()) < 1:
                    await asyncio.sleep(0.05)
                server[0].suspend()  # n1's env server stops answering; its gate still answers probes
                states: list[str] = []
                meanwhile: list[dict] = []
                while (state := figures(folder)["nodes"]["n1"]["state"]) != "lost":
                    if not states or states[-1] != state:
                        states.append(state)
                    if state == "sick" and not meanwhile:  # new episodes while n1 is sick
                        meanwhile = await asyncio.gather(*(client.run(0.1, i=i) for i in range(3)))
                    await asyncio.sleep(0.05)
                states.append("lost")
                n1 = figures(folder)["nodes"]["n1"]
                sent_while_sick = n1["done"] + n1["failed"] + n1["running"]  # episodes sent to n1 so far
                server[0].resume()
                wait_for(lambda: figures(folder)["nodes"]["n1"]["state"] == "up", backstop(30), "n1 back up")
                after = await asyncio.gather(*(client.run(0.2, i=i) for i in range(6)))
                first = await asyncio.gather(*running)
                return first, states, {"sent": sent_while_sick, "meanwhile": meanwhile}, after
            finally:
                await client.close()

        first, states, seen, after = _run(play())
    assert states == ["up", "sick", "lost"], states
    assert {reply["episode"]["server"] for reply in seen["meanwhile"]} == {"n2"}, "nothing new goes to a sick node"
    assert seen["sent"] == 1, "n1 was sent only the episode it had before it fell sick"
    assert [reply["success"] for reply in first].count(False) == 1, "its episode in flight failed when it was lost"
    assert {reply["episode"]["server"] for reply in after} == {"n1", "n2"}, "healthy again, it gets work"
