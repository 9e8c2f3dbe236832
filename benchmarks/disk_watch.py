"""What one check of the disk watch costs (air/sandbox/disk_watch.py, air/sandbox/disk_probe.py), where the engine
cannot size a container (overlay2 on ext4).

    uv run python benchmarks/disk_watch.py [--json] [--checks 20] [--folders 0 150000]

For each ``--folders`` count, one sandbox (cpus 1, memory 1g, disk 20g) that holds that many empty folders in its
workspace, then ``--checks`` checks in a row (the first starts the container's probe and walks from ``/``):

- check_ms_first_<n>, check_ms_median_<n>: wall time of the first check and the median of the others;
- host_cpu_ms_per_check_<n>: CPU time of the whole host (engine, probe, this process) per check after the first,
  from /proc/stat: what a check costs the machine's rollouts.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from air.sandbox.config import SandboxConfig  # noqa: E402
from air.sandbox.container import Sandbox  # noqa: E402


def host_cpu_s() -> float:
    with open("/proc/stat") as f:
        fields = f.readline().split()[1:8]
    return sum(map(int, fields)) / os.sysconf("SC_CLK_TCK")


async def measure(folders: int, checks: int) -> dict[str, float]:
    box = await Sandbox.create(SandboxConfig(run_id="bench-disk", cpus=1.0, memory="1g", tmp_size="512m", disk="20g"))
    try:
        if not box.disk.enabled:
            sys.exit("this engine sizes containers itself: there is no disk watch to measure")
        if folders:
            make = f"python3 -c \"import os; os.mkdir('m'); [os.mkdir(f'm/{{i}}') for i in range({folders})]\""
            await box.run(make, timeout=600)
        started = time.perf_counter()
        await box.disk.check()
        first = time.perf_counter() - started
        walls, cpu = [], host_cpu_s()
        for _ in range(checks):
            started = time.perf_counter()
            await box.disk.check()
            walls.append(time.perf_counter() - started)
        cpu = host_cpu_s() - cpu
    finally:
        await box.destroy()
    return {
        f"check_ms_first_{folders}": first * 1000,
        f"check_ms_median_{folders}": statistics.median(walls) * 1000,
        f"host_cpu_ms_per_check_{folders}": cpu / checks * 1000,
    }


async def main_async(args: argparse.Namespace) -> dict[str, float]:
    result: dict[str, float] = {}
    for folders in args.folders:
        result.update(await measure(folders, args.checks))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--checks", type=int, default=20)
    parser.add_argument("--folders", type=int, nargs="+", default=[0, 150_000])
    args = parser.parse_args()
    result = asyncio.run(main_async(args))
    if args.json:
        print(json.dumps(result))
    else:
        for key, value in result.items():
            print(f"{key:>32}: {value:.1f}")


if __name__ == "__main__":
    main()
