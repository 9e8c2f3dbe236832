"""A node's link cut and healed, on a real network between hosts of one machine (rigs/netns.py: each env node in
a network namespace of its own, its gate on a veth address; the spreader and the client in the root one).

    uv run --group dev --extra tiny python benchmarks/fleet_network_cut.py [--runs 3] [--hold 2 20]   # as root

Per run: two stand-in nodes, three long episodes running on each; n1's link is cut (``link_down``: its host end
set down) or loses every packet (``every_packet_lost``: nftables in its namespace), held ``--hold`` seconds
after n1 is lost, then healed. Measured: seconds from the cut to each of n1's in-flight episodes answered
failed; episodes failed vs in flight on n1 and on n2; seconds from the heal to n1 rejoined (the spreader's
log line, millisecond stamps); whether any request was answered other than once. Prints JSON.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from rigs.fleet import figures  # noqa: E402
from rigs.fleet_netns import CountingClient, fleet_on, nodes_up  # noqa: E402
from rigs.netns import Net, netns_problem, networks  # noqa: E402

LONG_S = 3600.0  # an episode that outlives the measurement
FAULTS = {"link_down": (Net.cut, Net.heal), "every_packet_lost": (lambda net: net.lose(100), Net.stop_losing)}
REJOINED = re.compile(r"^(\S+ \S+) INFO air\.fleet\.spreader: env node n1 rejoined", re.M)


async def until(predicate, what: str, timeout: float = 600.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise RuntimeError(f"waited {timeout:.0f} s in vain for {what}")
        await asyncio.sleep(0.02)


def rejoined_at(log: str) -> float | None:
    """The wall-clock time of the spreader's "n1 rejoined" line (logging's local-time stamp)."""
    found = REJOINED.search(log)
    if not found:
        return None
    return datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()


async def one_run(tmp: Path, fault: str, hold: float, settings: tuple[str, ...]) -> dict:
    cut, heal = FAULTS[fault]
    with networks(2) as nets, fleet_on(tmp, nets, capacity=4, spread_args=settings) as (folder, processes, address):
        client = CountingClient(address)
        first = [asyncio.create_task(client.run(LONG_S, i=i)) for i in range(6)]
        try:

            def running() -> dict:
                return {name: node["running"] for name, node in figures(folder)["nodes"].items()}

            await until(lambda: running() == {"n1": 3, "n2": 3}, "three episodes on each node")
            on_n1 = 3
            cut(nets[0])
            cut_at = time.monotonic()
            await until(lambda: sum(task.done() for task in first) >= on_n1, "n1's episodes failed")
            lost_at = time.monotonic()
            await asyncio.sleep(0.5)  # room for anything else to fail too (nothing should)
            ended = [task.result() for task in first if task.done()]
            await asyncio.sleep(max(0.0, lost_at + hold - time.monotonic()))
            heal(nets[0])
            healed_wall = time.time()
            await until(lambda: nodes_up(folder, ["n1"]), "n1 up again", timeout=300)
            after = await asyncio.gather(*(client.run(0.2, i=i) for i in range(8)))
            await asyncio.sleep(1.0)  # room for a second reply to arrive
            rejoined = rejoined_at(processes.log("spreader"))
            twice = {rid: n for rid, n in client.twice().items() if n > 1 or rid.startswith("stray")}
        finally:
            for task in first:  # n2's long episodes: never to end here
                task.cancel()
            await client.close()
    failed = [reply for reply in ended if not reply.body["success"]]
    return {
        "fault": fault,
        "hold_after_loss_s": hold,
        "failed_after_cut_s": sorted(round(reply.at - cut_at, 3) for reply in failed),
        "in_flight_on_cut_node": on_n1,
        "failed_on_cut_node": sum(1 for reply in failed if "env node n1 lost" in reply.body["error"]),
        "failed_elsewhere": sum(1 for reply in failed if "env node n1 lost" not in reply.body["error"]),
        "heal_to_up_s": None if rejoined is None else round(rejoined - healed_wall, 3),
        "reached_n1_after": sum(1 for reply in after if reply.server == "n1"),
        "answered_twice": len(twice),
    }


async def main_async(args: argparse.Namespace) -> dict:
    settings = ("--lost-after", str(args.lost_after), "--probe-interval", str(args.probe_interval))
    runs = []
    for fault in args.faults:
        for hold in args.hold:
            for _ in range(args.runs):
                with tempfile.TemporaryDirectory(prefix="air-bench-netcut-") as tmp:
                    runs.append(await one_run(Path(tmp), fault, hold, settings))
                print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    summary = {}
    for fault in args.faults:
        for hold in args.hold:
            mine = [run for run in runs if run["fault"] == fault and run["hold_after_loss_s"] == hold]
            last_failed = [max(run["failed_after_cut_s"]) for run in mine]
            ups = [run["heal_to_up_s"] for run in mine if run["heal_to_up_s"] is not None]
            summary[f"{fault}, held {hold:g} s"] = {
                "last_failed_after_cut_s": {"min": min(last_failed), "max": max(last_failed)},
                "heal_to_up_s": {"min": min(ups), "median": statistics.median(ups), "max": max(ups)} if ups else None,
                "failed_vs_in_flight": [f"{run['failed_on_cut_node']}/{run['in_flight_on_cut_node']}" for run in mine],
                "failed_elsewhere": sum(run["failed_elsewhere"] for run in mine),
                "answered_twice": sum(run["answered_twice"] for run in mine),
            }
    bound = args.lost_after + 2 * args.probe_interval
    return {"lost_after_s": args.lost_after, "probe_interval_s": args.probe_interval, "bound_s": bound,
            "summary": summary, "runs": runs}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--lost-after", type=float, default=10.0, help="the spreader's --lost-after (its default)")
    parser.add_argument("--probe-interval", type=float, default=1.0, help="the spreader's --probe-interval")
    parser.add_argument("--hold", type=float, nargs="+", default=[2.0, 20.0], help="seconds the cut lasts after loss")
    parser.add_argument("--faults", nargs="+", choices=list(FAULTS), default=list(FAULTS))
    args = parser.parse_args()
    problem = netns_problem()
    if problem:
        sys.exit(problem)
    print(json.dumps(asyncio.run(main_async(args)), indent=2))


if __name__ == "__main__":
    main()
