"""Sandbox benchmark: per-command overhead, warm and cold acquisition, concurrent throughput.

    uv run python benchmarks/sandbox.py [--json] [--commands 500] [--image TAG]

Targets (issue 2): overhead median <= 2 ms; warm acquire <= 50 ms; cold ready <= 1.5 s.
``first_acquire``: an acquire right after a pool of 4 opens, before any container of it is ready: it starts
its own container, beside the pool's four warming ones (issue 42), so it costs a cold start under contention.
``refilling_acquire``: warm acquires made back to back, while the pool starts the replacements of the ones
before (each acquire starts one): the shell check then competes with those starts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time

from air.sandbox.config import SandboxConfig
from air.sandbox.container import Sandbox
from air.sandbox.pool import SandboxPool


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


async def command_overhead(config: SandboxConfig, n: int) -> list[float]:
    sandbox = await Sandbox.create(config)
    try:
        for _ in range(20):  # warm up the connection and bash
            await sandbox.run("true")
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await sandbox.run("true")
            times.append((time.perf_counter() - start) * 1000)
        return times
    finally:
        await sandbox.destroy()


async def cold_ready(config: SandboxConfig, n: int) -> list[float]:
    times = []
    for _ in range(n):
        start = time.perf_counter()
        sandbox = await Sandbox.create(config)
        await sandbox.run("true")
        times.append(time.perf_counter() - start)
        await sandbox.destroy()
    return times


async def warm_acquire(config: SandboxConfig, n: int) -> list[float]:
    times = []
    async with SandboxPool(config, size=2) as pool:
        for _ in range(n):
            await pool.wait_ready(timeout=120)
            start = time.perf_counter()
            sandbox = await pool.acquire()
            times.append((time.perf_counter() - start) * 1000)
            pool.release(sandbox)
    return times


async def first_acquire(config: SandboxConfig, n: int) -> tuple[list[float], list[float]]:
    """(seconds to open a pool of 4, seconds for the acquire made at once after it), each of ``n`` fresh pools."""
    opens, firsts = [], []
    for _ in range(n):
        start = time.perf_counter()
        async with SandboxPool(config, size=4) as pool:
            opened = time.perf_counter()
            sandbox = await pool.acquire()
            firsts.append(time.perf_counter() - opened)
            opens.append(opened - start)
            pool.release(sandbox)
            await pool.wait_ready(timeout=120)  # the next pool's start is not slowed by this one's warming
    return opens, firsts


async def refilling_acquire(config: SandboxConfig, rounds: int) -> list[float]:
    """Milliseconds of the 2nd to 4th of four acquires made back to back from a full pool of 4, ``rounds`` times."""
    times = []
    async with SandboxPool(config, size=4) as pool:
        for _ in range(rounds):
            await pool.wait_ready(timeout=120)
            taken = [await pool.acquire()]  # the pool idle: warm as warm_acquire times it
            for _ in range(3):
                start = time.perf_counter()
                taken.append(await pool.acquire())
                times.append((time.perf_counter() - start) * 1000)
            for sandbox in taken:
                pool.release(sandbox)
    return times


async def concurrent_throughput(config: SandboxConfig, sessions: int, seconds: float) -> float:
    sandboxes = await asyncio.gather(*(Sandbox.create(config) for _ in range(sessions)))
    try:
        deadline = time.perf_counter() + seconds
        counts = [0] * sessions

        async def drive(i: int, sb: Sandbox) -> None:
            while time.perf_counter() < deadline:
                await sb.run(f"echo {i} $RANDOM > /dev/null")
                counts[i] += 1

        start = time.perf_counter()
        await asyncio.gather(*(drive(i, sb) for i, sb in enumerate(sandboxes)))
        return sum(counts) / (time.perf_counter() - start)
    finally:
        await asyncio.gather(*(sb.destroy() for sb in sandboxes))


async def main_async(args: argparse.Namespace) -> dict:
    config = SandboxConfig(
        image=args.image or "", run_id="benchmark", cpus=1.0, memory="512m", tmp_size="128m", shm_size="64m"
    )
    overhead = await command_overhead(config, args.commands)
    cold = await cold_ready(config, args.cold)
    warm = await warm_acquire(config, args.warm)
    opens, firsts = await first_acquire(config, args.first)
    refilling = await refilling_acquire(config, args.first)
    throughput = await concurrent_throughput(config, 16, args.seconds)
    return {
        "image": config.resolved_image(),
        "commands": args.commands,
        "overhead_ms_median": round(statistics.median(overhead), 3),
        "overhead_ms_p99": round(_pct(overhead, 0.99), 3),
        "warm_acquire_ms": round(statistics.median(warm), 2),
        "warm_acquire_ms_max": round(max(warm), 2),
        "cold_ready_s": round(statistics.median(cold), 3),
        "cold_ready_s_max": round(max(cold), 3),
        "pool_open_s": round(statistics.median(opens), 3),
        "first_acquire_s": round(statistics.median(firsts), 3),
        "first_acquire_s_max": round(max(firsts), 3),
        "refilling_acquire_ms": round(statistics.median(refilling), 2),
        "refilling_acquire_ms_max": round(max(refilling), 2),
        "concurrent_sessions": 16,
        "concurrent_commands_per_s": round(throughput, 1),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--commands", type=int, default=500, help="commands timed for the overhead")
    parser.add_argument("--cold", type=int, default=5, help="cold starts timed")
    parser.add_argument("--warm", type=int, default=10, help="warm acquisitions timed")
    parser.add_argument("--first", type=int, default=3, help="first_acquire pools, refilling rounds")
    parser.add_argument("--seconds", type=float, default=5.0, help="duration of the concurrent run")
    parser.add_argument("--image", help="image to use (default: the recipe's tag, or $AIR_IMAGE)")
    args = parser.parse_args(argv)
    results = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(results))
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title="air sandbox benchmark")
        table.add_column("measure")
        table.add_column("value", justify="right")
        table.add_column("target", justify="right")
        targets = {"overhead_ms_median": "<= 2", "warm_acquire_ms": "<= 50", "cold_ready_s": "<= 1.5"}
        for key, value in results.items():
            table.add_row(key, str(value), targets.get(key, ""))
        Console().print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
