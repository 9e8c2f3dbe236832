"""The spreader is no single point: `air fleet spread` holds the address in a relay and runs the spreader as its
child. Killed or frozen, the spreader's episodes in flight are answered as failed within a bound, a new one
serves at the same address, and the nodes cancel the runs the dead one asked for. Even with the relay itself
killed, the nodes cancel the abandoned runs once its spreader has been silent for its lost_after_s."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil

from air.fleet import front
from air.fleet.settings import SpreadSettings
from rigs.fleet import WireClient, figures, fleet, free_port, make_folder, spread_command, wait_for
from rigs.patience import backstop

LOST_AFTER, PROBE = 2.0, 0.25
FAST = ("--lost-after", str(LOST_AFTER), "--probe-interval", str(PROBE))
BOUND = LOST_AFTER + 2 * PROBE


def _spreader_of(relay_pid: int) -> psutil.Process:
    """The process that spreads: the relay's child (before the relay, 4914253, the one process itself). The
    nodes are up once the fixture yields, so a spreader has started."""
    relay = psutil.Process(relay_pid)
    children = relay.children()
    assert len(children) <= 1, children
    return children[0] if children else relay


def _cancelled(folder, node: str) -> list[str]:
    return re.findall(r"^cancel (\w+) running$", (folder.logs(node) / "env-server.log").read_text(), re.M)


async def _in_flight(client: WireClient, folder, count: int, seconds: float) -> list[asyncio.Task]:
    running = [asyncio.create_task(client.run(seconds, i=i)) for i in range(count)]
    while sum(node["running"] for node in figures(folder)["nodes"].values()) < count:
        await asyncio.sleep(0.05)
    return running


def _figures(fault: str, in_flight: int, replies: list[dict], answered: float) -> None:
    """One line benchmarks/fleet_faults.py reads (pytest -s)."""
    lost = sum(not reply["success"] for reply in replies)
    line = {"fault": fault, "in_flight": in_flight, "episodes_lost": lost, "answered_s": round(answered, 3)}
    print("FAULT-FIGURES " + json.dumps(line))


def test_a_killed_spreader_answers_its_episodes_and_comes_back_at_the_same_address(tmp_path: Path) -> None:
    with fleet(tmp_path, 2, capacity=4, spread_args=FAST) as (folder, processes, address):
        relay = processes.started["spreader"].pid
        first = _spreader_of(relay)

        async def play() -> tuple[list[dict], float, list[dict]]:
            client = WireClient(address)
            try:
                running = await _in_flight(client, folder, 6, 60.0)
                first.kill()  # SIGKILL: it answers nothing itself
                killed = time.monotonic()
                replies = await asyncio.wait_for(asyncio.gather(*running), backstop(30))
                answered = time.monotonic() - killed
                wait_for(lambda: figures(folder).get("spreader_starts") == 2, backstop(30), "the second spreader")
                wait_for(lambda: all(n["state"] == "up" for n in figures(folder)["nodes"].values()), backstop(30),
                         "both nodes up for the new spreader")  # fmt: skip
                after = await asyncio.wait_for(asyncio.gather(*(client.run(0.2, i=i) for i in range(4))), backstop(60))
                return replies, answered, after
            finally:
                await client.close()

        replies, answered, after = asyncio.run(play())
        second = _spreader_of(relay)
        # The nodes cancel what the dead spreader asked for once it has been silent for its lost_after_s.
        wait_for(lambda: len(_cancelled(folder, "n1")) + len(_cancelled(folder, "n2")) == 6, backstop(30),
                 "the abandoned runs cancelled on the nodes")  # fmt: skip
        spread_log = processes.log("spreader")
        status = subprocess.run([sys.executable, "-m", "air.cli.main", "fleet", "status", str(folder.root)],
                                capture_output=True, text=True, timeout=backstop(60)).stdout  # fmt: skip
    _figures("spreader killed", 6, replies, answered)
    assert "spreader started 2 times (6 episodes failed by its deaths)" in status, status
    assert [reply["success"] for reply in replies] == [False] * 6
    assert all(reply["error"].startswith("the spreader died (signal SIGKILL)") for reply in replies), replies
    assert answered < 2.0, f"answered {answered:.2f} s after the kill"
    assert second.pid != first.pid
    assert all(reply["success"] for reply in after) and {r["episode"]["server"] for r in after} == {"n1", "n2"}
    assert "6 episodes in flight answered as failed; starting it again" in spread_log


def test_a_frozen_spreader_is_ended_and_its_episodes_answered_within_the_bound(tmp_path: Path) -> None:
    with fleet(tmp_path, 1, capacity=4, spread_args=FAST) as (folder, processes, address):
        first = _spreader_of(processes.started["spreader"].pid)

        async def play() -> tuple[list[dict], float, dict]:
            client = WireClient(address)
            try:
                running = await _in_flight(client, folder, 3, 30.0)
                first.suspend()  # SIGSTOP: alive, its socket open, answering nothing
                frozen = time.monotonic()
                replies = await asyncio.wait_for(asyncio.gather(*running), backstop(60))
                answered = time.monotonic() - frozen
                wait_for(lambda: figures(folder).get("spreader_starts") == 2, backstop(30), "the second spreader")
                return replies, answered, await asyncio.wait_for(client.run(0.1, i=9), backstop(60))
            finally:
                await client.close()

        replies, answered, after = asyncio.run(play())
    _figures("spreader frozen", 3, replies, answered)
    assert not first.is_running() or first.status() == psutil.STATUS_ZOMBIE
    assert all(not reply["success"] and "the spreader died (signal SIGKILL)" in reply["error"] for reply in replies)
    assert answered < BOUND + 1.0, f"answered {answered:.2f} s after the freeze (bound {BOUND} s)"
    assert after["success"] and after["episode"]["server"] == "n1"


def test_with_the_relay_killed_too_the_nodes_cancel_the_abandoned_runs(tmp_path: Path) -> None:
    with fleet(tmp_path, 2, capacity=4, spread_args=FAST) as (folder, processes, address):
        relay = processes.started["spreader"]
        spreader = _spreader_of(relay.pid)

        async def play() -> float:
            client = WireClient(address)
            try:
                await _in_flight(client, folder, 4, 60.0)
                os.kill(relay.pid, signal.SIGKILL)  # the relay alone: its spreader sees its lifeline close
                killed = time.monotonic()
                wait_for(lambda: len(_cancelled(folder, "n1")) + len(_cancelled(folder, "n2")) == 4,
                         backstop(30), "the abandoned runs cancelled on the nodes")  # fmt: skip
                return time.monotonic() - killed
            finally:
                await client.close()

        cancelled_after = asyncio.run(play())
        relay.wait()
        wait_for(lambda: not spreader.is_running() or spreader.status() == psutil.STATUS_ZOMBIE, backstop(30),
                 "the orphaned spreader to end itself")  # fmt: skip
        # A relay started again at the same address serves new episodes.
        processes.start("spreader-again", spread_command(folder, address, *FAST))

        async def again() -> dict:
            client = WireClient(address)
            try:
                return await asyncio.wait_for(client.run(0.1, i=0), backstop(60))
            finally:
                await client.close()

        reply = asyncio.run(again())
    print("FAULT-FIGURES " + json.dumps({"fault": "relay killed", "in_flight": 4, "answered_s": None,
                                         "nodes_cancelled_s": round(cancelled_after, 2)}))  # fmt: skip
    assert cancelled_after < LOST_AFTER + 2 * PROBE + 1.0 + 1.0, f"cancelled {cancelled_after:.2f} s after the kill"
    assert reply["success"]


def test_a_spreader_that_cannot_start_stops_the_relay_with_the_reason(tmp_path: Path) -> None:
    with fleet(tmp_path, 1, capacity=1, spread_args=FAST) as (folder, processes, _address):
        (folder.keys / "client.key").chmod(0o644)
        done = processes.start("refused", spread_command(folder, f"tcp://127.0.0.1:{free_port()}", *FAST))
        code = done.wait(backstop(30))
        log = processes.log("refused")
    assert code != 0 and "readable by others" in log and "chmod 600" in log


def test_a_stopped_relay_answers_its_episodes_and_leaves_no_spreader(tmp_path: Path) -> None:
    with fleet(tmp_path, 1, capacity=4, spread_args=FAST) as (folder, processes, address):
        relay = processes.started["spreader"]
        spreader = _spreader_of(relay.pid)

        async def play() -> list[dict]:
            client = WireClient(address)
            try:
                running = await _in_flight(client, folder, 3, 60.0)
                relay.send_signal(signal.SIGTERM)  # as Slurm ends the step, or Ctrl-C
                return await asyncio.wait_for(asyncio.gather(*running), backstop(30))
            finally:
                await client.close()

        replies = asyncio.run(play())
        code = relay.wait(backstop(30))
    assert code == 0
    assert all(not reply["success"] and "the spreader stopped" in reply["error"] for reply in replies), replies
    assert not spreader.is_running() or spreader.status() == psutil.STATUS_ZOMBIE


def test_a_spreader_that_dies_at_every_start_stops_its_relay(tmp_path: Path, monkeypatch, caplog) -> None:
    monkeypatch.setattr(front, "WORKER_MODULE", "air.fleet.no_such_module")  # python -m exits 1 at once
    relay = front.Front(make_folder(tmp_path / "fleet"), f"tcp://127.0.0.1:{free_port()}", "train", SpreadSettings())
    with caplog.at_level("ERROR", logger="air.fleet.front"):
        code = asyncio.run(asyncio.wait_for(relay.run(), backstop(60)))
    assert code == 1 and relay.starts == front.QUICK_DEATHS
    assert f"the spreader died {front.QUICK_DEATHS} times within 10 s of starting: not again" in caplog.text
