"""How far one spreader goes: ``uv run python benchmarks/fleet.py scale [--json]`` (the options are fleet.py's).

Stand-in env nodes, each a real ``air fleet node --no-docker`` process (its CURVE gate) with its own stand-in
server process (rigs/stub_env_server.py), ``--node-capacity`` episodes at once each; one ``air fleet
spread`` (default settings: a status probe per node per second); one client keeping episodes of
``--scale-seconds`` in flight. Three phases, so that the spreader's cost can be told apart by what it grows
with: ``--nodes``/8 nodes with ``--in-flight``/8 episodes in flight, then all ``--nodes`` with as many, then
with ``--in-flight`` (``--scale-episodes`` episodes in that last phase, proportionally fewer before). On the
spreader's pid (psutil): user + system seconds over each phase, less its idle rate with the same nodes up (its
probes alone, measured for 10 s before), and its RSS (sampled every 0.5 s); the episodes' latencies against
their nominal length say whether the host kept up. Everything shares this host's cores, so the spreader's CPU
per episode, not the rate reached, is the figure that says how many episodes per second one spreader core
carries.
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path

import psutil

from benchmarks.fleet_client import Client, cpu_s, dist, nodes_up
from rigs.fleet import Processes, figures, free_port, make_folder, node_command, spread_command, wait_for

IDLE_S = 10.0


async def scale(args: argparse.Namespace) -> dict:
    with tempfile.TemporaryDirectory(prefix="air-bench-fleet-") as tmp:
        folder = make_folder(Path(tmp) / "fleet")
        processes = Processes(Path(tmp) / "logs")
        address = f"tcp://127.0.0.1:{free_port()}"
        client: Client | None = None
        phases: list[dict] = []
        try:
            spreader = psutil.Process(processes.start("spreader", spread_command(folder, address)).pid)
            names = [f"n{index:02d}" for index in range(1, args.nodes + 1)]
            client = Client(address)
            plan = [(args.nodes // 8, args.in_flight // 8), (args.nodes, args.in_flight // 8)]
            plan.append((args.nodes, args.in_flight))
            for index, (count, in_flight) in enumerate(plan):
                if index == 0 or count != plan[index - 1][0]:
                    started = time.perf_counter()
                    for name in names[len(processes.started) - 1 : count]:
                        command = node_command(folder, name, "--capacity", str(args.node_capacity))
                        processes.start(name, command, {"STUB_NAME": name})
                    wait_for(lambda n=count: nodes_up(folder, n), 600, f"{count} nodes up", interval=0.5)
                    up_s = time.perf_counter() - started
                    before = cpu_s(spreader)
                    await asyncio.sleep(IDLE_S)
                    idle = (cpu_s(spreader) - before) / IDLE_S
                    rss_idle = spreader.memory_info().rss
                nodes = [psutil.Process(processes.started[name].pid) for name in names[:count]]
                episodes = args.scale_episodes * in_flight // args.in_flight
                result = await phase(client, spreader, nodes, folder, in_flight, episodes, args)
                net = result.pop("spreader_cpu_s") - idle * result["wall_s"]
                phases.append(
                    {
                        "nodes": count,
                        "in_flight": in_flight,
                        "nodes_up_s": round(up_s, 1),
                        "spreader_idle_cpu_s_per_s": round(idle, 4),
                        "spreader_cpu_ms_per_episode": round(net / episodes * 1000, 3),
                        "episodes_per_spreader_core_s": round(episodes / net),
                        "spreader_rss_mib_idle": round(rss_idle / 2**20, 1),
                        **result,
                    }
                )
        finally:
            if client is not None:
                client.close()
            processes.stop_all()
    (n1, f1, c1), (n2, _, c2), (_, f3, c3) = (
        (p["nodes"], p["in_flight"], p["spreader_cpu_ms_per_episode"]) for p in phases
    )
    per_node, per_in_flight = (c2 - c1) / (n2 - n1), (c3 - c2) / (f3 - f1)
    fit = {
        "base": round(c1 - per_node * n1 - per_in_flight * f1, 4),
        "per_node": round(per_node, 5),
        "per_1000_in_flight": round(per_in_flight * 1000, 4),
    }
    return {
        "node_capacity": args.node_capacity,
        "episode_s": args.scale_seconds,
        "phases": phases,
        "spreader_ms_per_episode_fit": fit,
    }


async def phase(client: Client, spreader, nodes, folder, in_flight: int, episodes: int, args) -> dict:
    """``episodes`` episodes, ``in_flight`` at a time: the spreader's CPU (its idle probing included) and RSS."""
    peak = {"rss": 0, "waiting": 0}

    async def sample() -> None:
        while True:
            peak["rss"] = max(peak["rss"], spreader.memory_info().rss)
            peak["waiting"] = max(peak["waiting"], figures(folder).get("waiting", 0))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample())
    me = psutil.Process()
    done_before = sum(node["done"] for node in figures(folder)["nodes"].values())
    before = {"spreader": cpu_s(spreader), "nodes": cpu_s(*nodes), "client": sum(me.cpu_times()[:2])}
    slots = asyncio.Semaphore(in_flight)
    latencies: list[float] = []
    failed: list[dict] = []

    async def one() -> None:
        async with slots:
            episode = await client.run(args.scale_seconds)
        latencies.append(episode.latency)
        if not episode.reply.result()["success"]:
            failed.append(episode.reply.result())

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(episodes)))
    wall = time.perf_counter() - start
    used = {"spreader": cpu_s(spreader), "nodes": cpu_s(*nodes), "client": sum(me.cpu_times()[:2])}
    used = {key: used[key] - before[key] for key in used}
    sampler.cancel()
    assert not failed, f"{len(failed)} episodes failed: {failed[0]}"
    done = lambda: sum(node["done"] for node in figures(folder)["nodes"].values()) - done_before  # noqa: E731
    wait_for(lambda: done() == episodes, 10, "the spreader's count of episodes done")
    return {
        "episodes": episodes,
        "wall_s": round(wall, 1),
        "episodes_per_s": round(episodes / wall, 1),
        "latency_s": {k: round(v / 1000, 2) for k, v in dist(latencies).items() if k != "n"},
        "spreader_cpu_s": used["spreader"],
        "spreader_rss_mib_peak": round(peak["rss"] / 2**20, 1),
        "waiting_in_spreader_peak": peak["waiting"],
        "nodes_cpu_ms_per_episode": round(used["nodes"] / episodes * 1000, 3),  # the gates and stand-ins
        "client_cpu_ms_per_episode": round(used["client"] / episodes * 1000, 3),
    }
