"""What the fleet (air/fleet: env nodes behind gates, a spreader in front) costs, on loopback.

    uv run python benchmarks/fleet.py [spreading|real|scale|loss|all] [--json]

- spreading: the time spreading adds to an episode. The same stand-in episodes (rigs/stub_env_server.py,
  ``--seconds`` each, ``--concurrent`` at once) sent by one client (a) straight to a stand-in env server and
  (b) through ``air fleet spread`` and one ``air fleet node`` gate (CURVE) to the same kind of server,
  alternated round by round. Added time = (b)'s latency percentile minus (a)'s.
- real: episodes per minute of air_mlgym's real v1 env server (real containers, verifiers' EnvClient, the
  scripted ``improve`` policy): direct, spreader + one node, spreader + two nodes (the second on a second
  Docker engine). benchmarks/fleet_real.py, run in ``.venv-v1``.
- scale: one spreader over 64 stand-in nodes (64 ``air fleet node --no-docker`` processes, each with its own
  stand-in server process) with 2,000 episodes in flight: its CPU seconds per episode and its RSS
  (benchmarks/fleet_scale.py).
- loss: seconds from SIGKILL of a node's process group to its in-flight episodes answered failed, with the
  default ``--lost-after 10 --probe-interval 1`` and a shorter setting; asserts that exactly the episodes
  that were on the killed node fail.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.fleet_client import Client, Episode, cpu_s, dist, nodes_up, pct, wave  # noqa: E402
from benchmarks.fleet_scale import scale  # noqa: E402
from rigs.fleet import (  # noqa: E402
    STUB,
    Processes,
    figures,
    free_port,
    make_folder,
    node_command,
    spread_command,
    wait_for,
)

LONG_S = 3600.0  # an episode that outlives the measurement (node loss)


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


# --- 1. the time spreading adds ---------------------------------------------------------------------------------


async def spreading(args: argparse.Namespace) -> dict:
    capacity = 2 * args.concurrent
    with tempfile.TemporaryDirectory(prefix="air-bench-fleet-") as tmp:
        folder = make_folder(Path(tmp) / "fleet")
        processes = Processes(Path(tmp) / "logs")
        addresses = {"direct": f"tcp://127.0.0.1:{free_port()}", "spread": f"tcp://127.0.0.1:{free_port()}"}
        clients: dict[str, Client] = {}
        try:
            server_args = [str(folder.env_file), addresses["direct"], str(capacity)]
            processes.start("direct", [*STUB, *server_args], {"STUB_NAME": "direct"})
            processes.start("n1", node_command(folder, "n1", "--capacity", str(capacity)), {"STUB_NAME": "n1"})
            spreader = processes.start("spreader", spread_command(folder, addresses["spread"]))
            wait_for(lambda: nodes_up(folder, 1), 60, "the node up")
            clients = {mode: Client(address) for mode, address in addresses.items()}
            for client in clients.values():  # connections, handshakes, first allocations
                await wave(client, args.concurrent, args.concurrent, args.seconds)
            latencies: dict[str, list[float]] = {"direct": [], "spread": []}
            rounds: dict[str, list[float]] = {"direct": [], "spread": []}
            # the relay with its spreader (its child), and the node's gate alone (not its env server)
            relay, gate = psutil.Process(spreader.pid), psutil.Process(processes.started["n1"].pid)
            measures = (lambda: cpu_s(relay), lambda: sum(gate.cpu_times()[:2]))
            relay_cpu = [measure() for measure in measures]
            for index in range(args.rounds):
                for mode in ("direct", "spread") if index % 2 == 0 else ("spread", "direct"):
                    done = await wave(clients[mode], args.episodes, args.concurrent, args.seconds)
                    latencies[mode] += [e.latency for e in done]
                    rounds[mode].append(round(pct([e.latency for e in done], 0.5) * 1000, 2))
            cpu = [measure() - before for measure, before in zip(measures, relay_cpu, strict=True)]
        finally:
            for client in clients.values():
                client.close()
            processes.stop_all()
    direct, spread = dist(latencies["direct"]), dist(latencies["spread"])
    measured = args.rounds * args.episodes
    return {
        "episode_s": args.seconds,
        "concurrent": args.concurrent,
        "episodes_per_side": measured,
        "direct_ms": direct,
        "spread_ms": spread,
        "added_ms": {q: round(spread[q] - direct[q], 2) for q in ("p50", "p90", "p99")},
        "p50_per_round_ms": rounds,
        "spreader_cpu_ms_per_episode": round(cpu[0] / measured * 1000, 3),
        "gate_cpu_ms_per_episode": round(cpu[1] / measured * 1000, 3),  # the node process: its gate
    }


# --- 4. node loss -------------------------------------------------------------------------------------------------


def n1_figures(folder) -> dict:
    return figures(folder)["nodes"]["n1"]


def n1_running(folder, count: int) -> bool:
    return n1_figures(folder)["running"] == count


def rejoined(folder) -> bool:
    """n1 up in the spreader's figures, at the address of its newest start."""
    node = n1_figures(folder)
    return node["state"] == "up" and node["address"] == folder.records()["n1"].address


async def loss_trials(tmp: Path, lost_after: float, probe: float, trials: int, capacity: int) -> dict:
    """Two nodes, every slot filled with long episodes; kill n1 (a random moment within a probe interval);
    time each of its episodes' failed answer; start n1 again and repeat."""
    folder = make_folder(tmp / "fleet")
    processes = Processes(tmp / "logs")
    address = f"tcp://127.0.0.1:{free_port()}"
    client: Client | None = None
    seconds: list[float] = []
    lost: list[int] = []
    per_kill: list[float] = []  # the last of each kill's episodes answered, seconds after it
    try:
        for name in ("n1", "n2"):
            processes.start(name, node_command(folder, name, "--capacity", str(capacity)), {"STUB_NAME": name})
        settings = ("--lost-after", str(lost_after), "--probe-interval", str(probe))
        processes.start("spreader", spread_command(folder, address, *settings))
        wait_for(lambda: nodes_up(folder, 2), 60, "both nodes up")
        client = Client(address)
        running: list[Episode] = []
        for trial in range(trials):
            running += [await client.start(LONG_S) for _ in range(2 * capacity - len(running))]
            while not all(e.server for e in running):
                await asyncio.sleep(0.02)
            on_n1 = [e for e in running if e.server == "n1"]
            wait_for(partial(n1_running, folder, len(on_n1)), 10, "the spreader's count of n1's episodes")
            await asyncio.sleep(random.uniform(0, probe))
            killed = time.perf_counter()
            processes.kill("n1" if trial == 0 else f"n1-{trial}")
            await asyncio.wait_for(asyncio.gather(*(e.reply for e in on_n1)), lost_after + 10 * probe + 30)
            await asyncio.sleep(probe)  # anything else that would wrongly fail has had a probe to do it
            replies = [e.reply.result() for e in on_n1]
            assert all(not r["success"] and "env node n1 lost" in r["error"] for r in replies), replies
            running = [e for e in running if e.server != "n1"]
            assert not any(e.reply.done() for e in running), "an episode of the node left alive was answered"
            seconds += [e.answered - killed for e in on_n1]
            per_kill.append(round(max(e.answered for e in on_n1) - killed, 2))
            lost.append(len(on_n1))
            assert n1_figures(folder)["failed"] == sum(lost)
            if trial + 1 < trials:
                again = node_command(folder, "n1", "--capacity", str(capacity))
                processes.start(f"n1-{trial + 1}", again, {"STUB_NAME": "n1"})
                wait_for(lambda: rejoined(folder), 60, "n1 started again")
        losses = n1_figures(folder)["losses"]  # one per kill: a restarted node keeps its name's count
    finally:
        if client is not None:
            client.close()
        processes.stop_all()
    return {
        "lost_after_s": lost_after,
        "probe_interval_s": probe,
        "kills": trials,
        "episodes_lost_per_kill": lost,
        "failed_after_each_kill_s": per_kill,
        "n1_losses": losses,
        "failed_after_kill_s": {k: round(v / 1000, 2) for k, v in dist(seconds).items() if k != "n"},
        "bound_s": lost_after + 2 * probe,
    }


async def loss(args: argparse.Namespace) -> dict:
    result = {}
    for lost_after, probe, trials in ((10.0, 1.0, args.kills), (2.0, 0.25, args.kills + 2)):
        with tempfile.TemporaryDirectory(prefix="air-bench-fleet-") as tmp:
            key = f"lost_after_{lost_after:g}_probe_{probe:g}"
            result[key] = await loss_trials(Path(tmp), lost_after, probe, trials, args.loss_capacity)
    return result


# --- the driver ---------------------------------------------------------------------------------------------------


def real(args: argparse.Namespace) -> dict:
    python = ROOT / ".venv-v1" / "bin" / "python"
    if not python.exists():
        raise SystemExit(f"{python} is missing: UV_PROJECT_ENVIRONMENT=.venv-v1 uv sync --no-group classic --group v1")
    command = [str(python), str(ROOT / "benchmarks" / "fleet_real.py"), "--rounds", str(args.real_rounds)]
    command += ["--episodes", str(args.real_episodes), "--concurrent", str(args.real_concurrent)]
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True, cwd=ROOT)
    if done.returncode != 0:
        raise SystemExit(f"fleet_real.py exited {done.returncode}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def head() -> str:
    """The commit measured, and whether air/fleet differed from it (others may be editing this checkout)."""
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run([*git, "diff", "--quiet", "HEAD", "--", "air/fleet"]).returncode != 0
    return f"{commit}{' (air/fleet edited)' if dirty else ''}"


def measure(what: str, args: argparse.Namespace) -> dict:
    before, commit = load(), head()
    if what == "spreading":
        result = asyncio.run(spreading(args))
    elif what == "loss":
        result = asyncio.run(loss(args))
    elif what == "scale":
        result = asyncio.run(scale(args))
    else:
        result = real(args)
    return {**result, "head": commit, "load_before": before, "load_after": load()}


def flat(value, key: str = "") -> dict:
    """Nested figures as one line each: ``spreading.added_ms.p99``, ``scale.phases.2.spreader_cpu_ms_per_episode``."""
    if isinstance(value, dict) and not (value and all(isinstance(v, int | float) for v in value.values())):
        return {k: v for name, item in value.items() for k, v in flat(item, f"{key}.{name}".strip(".")).items()}
    if isinstance(value, list) and value and isinstance(value[0], dict):
        return {k: v for i, item in enumerate(value) for k, v in flat(item, f"{key}.{i}").items()}
    return {key: value}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", nargs="?", default="all", choices=["spreading", "real", "scale", "loss", "all"])
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    group = parser.add_argument_group("spreading")
    group.add_argument("--seconds", type=float, default=0.5, help="each stand-in episode's length")
    group.add_argument("--concurrent", type=int, default=32)
    group.add_argument("--episodes", type=int, default=320, help="per round and side")
    group.add_argument("--rounds", type=int, default=4, help="rounds, the two sides alternated")
    group = parser.add_argument_group("real")
    group.add_argument("--real-episodes", type=int, default=32, help="per configuration and round")
    group.add_argument("--real-concurrent", type=int, default=8)
    group.add_argument("--real-rounds", type=int, default=2)
    group = parser.add_argument_group("scale")
    group.add_argument("--nodes", type=int, default=64)
    group.add_argument("--node-capacity", type=int, default=32, help="episodes at once per stand-in node")
    group.add_argument("--in-flight", type=int, default=2000)
    group.add_argument("--scale-episodes", type=int, default=6000, help="in all")
    group.add_argument("--scale-seconds", type=float, default=5.0, help="each episode's length")
    group = parser.add_argument_group("loss")
    group.add_argument("--kills", type=int, default=3, help="kills at the default setting (two more at the short)")
    group.add_argument("--loss-capacity", type=int, default=8, help="episodes at once per node")
    args = parser.parse_args()
    whats = ["spreading", "loss", "scale", "real"] if args.what == "all" else [args.what]
    result = {what: measure(what, args) for what in whats}
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in flat(result).items():
            print(f"{key:>58}  {value}")


if __name__ == "__main__":
    main()
