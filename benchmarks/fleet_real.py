"""Episodes per minute of the real env, direct and spread: ``uv run python benchmarks/fleet.py real [--json]``
runs this in ``.venv-v1`` (verifiers 0.4.0); alone: ``.venv-v1/bin/python benchmarks/fleet_real.py``.

air_mlgym's v1 env server (``python -m air.env.v1_serve``: laneMerge, ``max_turns`` 6, real containers, a warm
pool of ``--concurrent``) driven by verifiers' own EnvClient against the scripted ``improve`` policy
(:class:`air.serving.server.PolicyServer`), in three configurations, all started once and kept up:

- direct: the client straight to one env server (this host's Docker engine);
- one node: ``air fleet spread`` in front of one ``air fleet node`` (gate + env server, this host's engine);
- two nodes: a spreader in front of two nodes, the second on a second Docker engine
  (scripts/second_docker_engine.sh), so that each node has an engine of its own as on two machines.

Each round runs ``--episodes`` episodes, ``--concurrent`` at once, in each configuration, the order rotated
round by round, after one warm-up wave in each. Episodes per minute of wall time per configuration and round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import verifiers.v1 as vf  # noqa: E402
from verifiers.v1.configs.client import EvalClientConfig  # noqa: E402
from verifiers.v1.serve import EnvClient  # noqa: E402
from verifiers.v1.utils import loaders  # noqa: E402

from air.fleet.node import remove_containers  # noqa: E402
from air.sandbox.config import SandboxConfig  # noqa: E402
from air.serving.server import PolicyServer  # noqa: E402
from rigs.fleet import Processes, figures, free_port, make_folder, node_command, spread_command, wait_for  # noqa: E402

ENGINE = ROOT / "scripts" / "second_docker_engine.sh"
KEY = {"AIR_BENCH_KEY": "bench"}  # the env servers read the policy server's key from this variable
CONFIGS = ("direct", "one_node", "two_nodes")


def engine(action: str, folder: Path, *images: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "DOCKER_HOST"}
    subprocess.run(["bash", str(ENGINE), action, str(folder), *images], env=env, check=True, stdout=sys.stderr)


def taskset(image: str, run_id: str, tmp: Path, pool: int) -> dict:
    return {"id": "air_mlgym", "task_configs": ["laneMerge"], "max_turns": 6, "image": image, "run_id": run_id,
            "pool_size": pool, "engine_wait": 20, "trajectory_dir": str(tmp / "trajectories" / run_id)}  # fmt: skip


def ours(tag: str) -> list[str]:
    """The run ids of this host's engine's containers: the direct server's and the nodes' a1 and b1."""
    return [f"{tag}-direct", f"{tag}-one_node-a1", f"{tag}-two_nodes-b1"]


def all_up(folder, count: int) -> bool:
    found = figures(folder).get("nodes", {})
    return len(found) == count and all(node["state"] == "up" for node in found.values())


async def wave(address: str, client_config, model: str, tasks: list, count: int, concurrent: int) -> dict:
    slots = asyncio.Semaphore(concurrent)
    client = EnvClient(address)
    failed: list[str] = []
    nodes: Counter[str] = Counter()

    async def one(index: int) -> None:
        async with slots:
            task_data = tasks[index % len(tasks)].data.model_dump(mode="json")
            try:
                episode = await client.run(client_config, model, vf.SamplingConfig(), task_data)
            except RuntimeError as exc:
                failed.append(str(exc))
                return
        if not episode.ok:
            failed.append(str(episode.errors or [e for t in episode.traces for e in t.errors]))
        nodes.update(trace.info.get("env_node", "direct") for trace in episode.traces)

    try:
        await client.wait_for_server_startup(timeout=120)
        start = time.perf_counter()
        await asyncio.gather(*(one(index) for index in range(count)))
        seconds = time.perf_counter() - start
    finally:
        await client.close()
    return {"seconds": seconds, "failed": failed, "nodes": dict(nodes)}


async def measure(args: argparse.Namespace, addresses: dict, client_config, model: str, tasks: list) -> dict:
    per_min: dict[str, list[float]] = {config: [] for config in CONFIGS}
    failed: dict[str, int] = dict.fromkeys(CONFIGS, 0)
    split: dict[str, Counter] = {config: Counter() for config in CONFIGS}
    for config in CONFIGS:  # lazy imports, first containers, handshakes
        warm = await wave(addresses[config], client_config, model, tasks, args.concurrent, args.concurrent)
        failed[config] += len(warm["failed"])
    for index in range(args.rounds):
        for config in CONFIGS[index % 3 :] + CONFIGS[: index % 3]:
            await asyncio.sleep(args.settle)  # the warm pools refilled after the configuration before
            done = await wave(addresses[config], client_config, model, tasks, args.episodes, args.concurrent)
            print(f"{config} round {index}: {done}", file=sys.stderr)
            per_min[config].append(round(args.episodes / done["seconds"] * 60, 1))
            failed[config] += len(done["failed"])
            split[config].update(done["nodes"])
    median = {config: statistics.median(values) for config, values in per_min.items()}
    return {
        "episodes_per_min": {config: round(value, 1) for config, value in median.items()},
        "episodes_per_min_per_round": per_min,
        "over_direct": {config: round(median[config] / median["direct"], 3) for config in CONFIGS[1:]},
        "over_direct_per_round": {  # each round's three ran back to back: their ratio is the least drift-prone
            config: [round(a / b, 3) for a, b in zip(per_min[config], per_min["direct"], strict=True)]
            for config in CONFIGS[1:]
        },
        "episodes_failed": failed,
        "episodes_per_node": {config: dict(counts) for config, counts in split.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--episodes", type=int, default=32, help="per configuration and round")
    parser.add_argument("--concurrent", type=int, default=8, help="episodes at once; each env server's warm pool")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settle", type=float, default=10.0, help="seconds between two configurations")
    args = parser.parse_args()
    image = SandboxConfig().resolved_image()
    tag = f"bench-fleet-{os.getpid()}"
    with tempfile.TemporaryDirectory(prefix="air-bench-fleet-") as tmp_name:
        tmp = Path(tmp_name)
        second = Path(tempfile.mkdtemp(prefix="air-fb-engine-", dir="/tmp"))  # short: sockets live there
        processes = Processes(tmp / "logs")
        direct_env = tmp / "direct.json"
        direct_env.write_text(json.dumps({"taskset": taskset(image, f"{tag}-direct", tmp, args.concurrent)}))
        addresses = {config: f"tcp://127.0.0.1:{free_port()}" for config in CONFIGS}
        folders = {}
        try:
            engine("start", second, image)
            server = [sys.executable, "-m", "air.env.v1_serve", str(direct_env), addresses["direct"]]
            processes.start("direct", [*server, str(args.concurrent)], KEY)
            for config, nodes in (("one_node", ("a1",)), ("two_nodes", ("b1", "b2"))):
                env = {"taskset": taskset(image, f"{tag}-{config}", tmp, args.concurrent)}
                folders[config] = folder = make_folder(tmp / config, env)
                for name in nodes:
                    engine_env = {"DOCKER_HOST": f"unix://{second}/docker.sock"} if name == "b2" else {}
                    processes.start(name, node_command(folder, name, stub=False), {**KEY, **engine_env})
                processes.start(f"spreader-{config}", spread_command(folder, addresses[config]))
            for config, count in (("one_node", 1), ("two_nodes", 2)):
                wait_for(lambda f=folders[config], n=count: all_up(f, n), 300, f"{config}: nodes up", interval=0.5)
            tasks = list(loaders.load_taskset(loaders.taskset_config_type("air_mlgym")(**taskset(image, tag, tmp, 0))))
            os.environ.update(KEY)
            with PolicyServer("improve") as policy:
                client_config = EvalClientConfig(base_url=policy.base_url, api_key_var="AIR_BENCH_KEY")
                started = time.perf_counter()
                result = asyncio.run(measure(args, addresses, client_config, policy.model_name, tasks))
                result["measured_s"] = round(time.perf_counter() - started, 1)
            for name in processes.started:
                processes.stop(name, timeout=120)  # a node removes its containers as it stops
            result["containers_left_after_stop"] = {run_id: remove_containers(run_id) for run_id in ours(tag)}
        finally:
            processes.stop_all()
            engine("stop", second)
            shutil.rmtree(second, ignore_errors=True)
    result.update(image=image, concurrent=args.concurrent, episodes=args.episodes, rounds=args.rounds)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
