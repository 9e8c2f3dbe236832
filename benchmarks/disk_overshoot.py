"""Bytes an agent puts on the host's disk against its sandbox's disk limit, attack by attack: with the engine's
quota (overlay2 on xfs with pquota, a second engine) and without one (this host's overlay2 on ext4: the watch).

    sudo uv run python benchmarks/disk_overshoot.py [--json] [--disk 200m] [--attacks writes fallocate ...]
    sudo bash scripts/second_docker_engine.sh start /tmp/xfs-engine --xfs 4G air-sandbox:<tag>
    sudo DOCKER_HOST=unix:///tmp/xfs-engine/docker.sock uv run python benchmarks/disk_overshoot.py

Root: it reads the container's upper folder (``GraphDriver.Data.UpperDir``) on the host. For each attack, one
sandbox (``disk`` limit, the default 4g file size cap), one command of the agent's (timeout 120 s), and, while it
runs and after, every 0.25 s: the blocks the container's upper folder takes (``du -s --block-size=1``, st_blocks,
hard links once) plus the blocks of the files its processes hold open after deleting them (read on the host from
``/proc/PID/fd``). Per attack: ``peak`` (the most seen, during or after the command), ``peak_x`` (peak / limit),
``after`` (what is left once the command returned), whether the watch or the quota stopped it (``stopped``) and
the command's last line. A quota engine never watches (``watch: no``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from air.sandbox.config import SandboxConfig, size_bytes  # noqa: E402
from air.sandbox.container import Sandbox  # noqa: E402

ATTACKS = {  # what the agent runs, in its workspace; each ends with "never" if nothing stopped it
    "writes": "for i in $(seq 150); do head -c 4M /dev/zero > w$i || break; done; echo never",
    "fallocate": "for i in 1 2 3; do touch f$i && fallocate -n -l 2G f$i || break; done; sleep 3; echo never",
    "sparse": "for i in 1 2 3; do truncate -s 1G s$i; dd if=/dev/zero of=s$i bs=1M count=64 conv=notrunc "
    "status=none || break; done; sleep 3; echo never",
    "folders": "python3 -c \"import os; os.mkdir('m'); [os.mkdir(f'm/{i}') for i in range(250000)]\"; echo never",
    "small_files": "python3 -c \"import os; os.mkdir('s'); [open(f's/{i}', 'w').write('x') for i in range(250000)]\";"
    " echo never",
    "deleted_open": "python3 -c \"import os, time\nfs = []\nfor i in range(150):\n  f = open(f'd{i}', 'wb'); "
    "os.unlink(f'd{i}'); f.write(bytes(4 << 20)); f.flush(); fs.append(f)\ntime.sleep(5)\"; echo never",
}


def upper_bytes(upper: str) -> int:
    run = subprocess.run(["du", "-s", "--block-size=1", upper], capture_output=True, text=True)
    return int(run.stdout.split()[0]) if run.stdout else 0


def deleted_open_bytes(pids: list[int]) -> int:
    seen, total = set(), 0
    for pid in pids:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            link = f"/proc/{pid}/fd/{fd}"
            try:
                if not os.readlink(link).endswith(" (deleted)"):
                    continue
                st = os.stat(link)
            except OSError:
                continue
            if st.st_nlink == 0 and (st.st_dev, st.st_ino) not in seen and not os.path.isdir(link):
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def on_disk(box: Sandbox, upper: str) -> int:
    try:
        pids = [int(row[1]) for row in box.container.top(ps_args="-eo user,pid")["Processes"]]
    except Exception:  # the container ended
        pids = []
    return upper_bytes(upper) + deleted_open_bytes(pids)


async def attack(name: str, disk: str) -> dict[str, object]:
    box = await Sandbox.create(SandboxConfig(run_id="bench-disk-overshoot", cpus=1.0, memory="2g", disk=disk))
    try:
        box.container.reload()
        upper = box.container.attrs["GraphDriver"]["Data"]["UpperDir"]
        base = on_disk(box, upper)
        peak, done = 0, asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, await asyncio.to_thread(on_disk, box, upper) - base)
                await asyncio.sleep(0.25)

        sampler = asyncio.create_task(sample())
        result = await box.run(ATTACKS[name], timeout=120)
        after = await asyncio.to_thread(on_disk, box, upper) - base
        done.set()
        await sampler
        peak = max(peak, after)
        last = (result.output.strip().splitlines() or [""])[-1][:100]
        return {
            "attack": name,
            "watch": "yes" if box.disk.enabled else "no",
            "limit_mib": size_bytes(disk) >> 20,
            "peak_mib": round(peak / 2**20, 1),
            "peak_x": round(peak / size_bytes(disk), 2),
            "after_mib": round(after / 2**20, 1),
            "stopped": "never" not in result.output,
            "last_line": last,
        }
    finally:
        await box.destroy()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--disk", default="200m")
    parser.add_argument("--attacks", nargs="*", default=list(ATTACKS), choices=list(ATTACKS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the container's upper folder is read on the host")
    rows = [await attack(name, args.disk) for name in args.attacks]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"engine: {os.environ.get('DOCKER_HOST', 'default')}  limit {args.disk}")
    print("| attack | watch | peak MiB | peak / limit | after MiB | stopped | last line |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['attack']} | {r['watch']} | {r['peak_mib']} | {r['peak_x']} | {r['after_mib']} | {r['stopped']} "
            f"| {r['last_line']} |"
        )


if __name__ == "__main__":
    asyncio.run(main())
