"""Bytes an agent puts on the host's disk against its sandbox's disk limit, attack by attack: with the engine's
quota (btrfs or overlay2 on xfs with pquota, a second engine) and without one (this host's overlay2 on ext4: the
watch).

    sudo uv run python benchmarks/disk_overshoot.py [--json] [--disk 200m] [--attacks writes fallocate ...]
    sudo bash scripts/second_docker_engine.sh start /tmp/q-engine --btrfs 8G air-sandbox:<tag>
    sudo DOCKER_HOST=unix:///tmp/q-engine/docker.sock uv run python benchmarks/disk_overshoot.py --disk 1g
    (--xfs 4G instead of --btrfs 8G where the kernel has xfs quotas; stop: ... stop /tmp/q-engine)

Root: it reads the container's upper folder (``GraphDriver.Data.UpperDir``) on the host. For each attack, one
sandbox (``disk`` limit, the default 4g file size cap), one command of the agent's (timeout 120 s), and, while it
runs and after, every 0.25 s: the blocks the container's upper folder takes (``du -s --block-size=1``, st_blocks,
hard links once) plus the blocks of the files its processes hold open after deleting them (read on the host from
``/proc/PID/fd``). Per attack: ``peak`` (the most seen, during or after the command), ``peak_x`` (peak / limit),
``after`` (what is left once the command returned), whether the watch stopped it (``stopped``: "never" not
printed), whether a write failed inside with "No space left on device" or "Disk quota exceeded" (``refused``: the
quota) and the command's last line. A quota engine never watches (``watch: no``).

On btrfs (storage driver btrfs: no upper folder) the bytes are the container's subvolume's referenced bytes as
its quota group counts them (``btrfs qgroup show --raw --sync -f SUBVOLUME``: data and metadata, folders and files
deleted but still open included), less what it referenced at the start. With simple quotas (what
scripts/second_docker_engine.sh --btrfs and scripts/engine_quota.sh turn on) that start is a few KiB; with full
quotas it is the image's files, which then count against the limit too. ``counted_x`` is the whole referenced count
over the limit: what the quota holds to at most 1.
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
    "writes": "for i in $(seq N4M); do head -c 4M /dev/zero > w$i || break; done; echo never",
    "fallocate": "for i in 1 2 3; do touch f$i && fallocate -n -l 2G f$i || break; done; sleep 3; echo never",
    # fallocate in pieces of a quarter of the limit, up to 3x it: where a quota cuts a reservation short
    "fallocate_parts": "for i in $(seq 12); do touch p$i && fallocate -n -l PARTk p$i || break; done; sleep 3;"
    " echo never",
    "sparse": "for i in 1 2 3; do truncate -s 1G s$i; dd if=/dev/zero of=s$i bs=1M count=64 conv=notrunc "
    "status=none || break; done; sleep 3; echo never",
    "folders": "python3 -c \"import os; os.mkdir('m'); [os.mkdir(f'm/{i}') for i in range(250000)]\"; echo never",
    "small_files": "python3 -c \"import os; os.mkdir('s'); [open(f's/{i}', 'w').write('x') for i in range(250000)]\";"
    " echo never",
    "deleted_open": "python3 -c \"import os, time\nfs = []\nfor i in range(N4M):\n  f = open(f'd{i}', 'wb'); "
    "os.unlink(f'd{i}'); f.write(bytes(4 << 20)); f.flush(); fs.append(f)\ntime.sleep(5)\"; echo never",
}


FULL = ("No space left on device", "Disk quota exceeded")


def command(name: str, disk: str) -> str:
    """The attack's command for a limit: N4M 4-MiB files (150, or twice the limit where that is more), PART KiB
    (a quarter of the limit)."""
    n4m = max(150, 2 * size_bytes(disk) // (4 << 20))
    return ATTACKS[name].replace("N4M", str(n4m)).replace("PART", str(size_bytes(disk) // 4 >> 10))


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


def referenced_bytes(subvolume: str) -> int:
    """A btrfs subvolume's referenced bytes (its quota group's ``rfer``), after a sync so that they are current."""
    run = subprocess.run(
        ["btrfs", "qgroup", "show", "--raw", "--sync", "-f", subvolume], capture_output=True, text=True
    )
    rows = [line.split() for line in run.stdout.splitlines() if line.startswith("0/")]
    return int(rows[0][1]) if rows else 0


def btrfs_subvolume(box: Sandbox) -> str:
    """The container's subvolume on a btrfs engine: DATA_ROOT/btrfs/subvolumes/<its layer's mount id>."""
    root = box.container.client.info()["DockerRootDir"]
    mount_id = Path(root, "image", "btrfs", "layerdb", "mounts", box.container.id, "mount-id").read_text().strip()
    return str(Path(root, "btrfs", "subvolumes", mount_id))


def on_disk(box: Sandbox, upper: str) -> int:
    if upper.startswith("btrfs:"):
        return referenced_bytes(upper.removeprefix("btrfs:"))
    try:
        pids = [int(row[1]) for row in box.container.top(ps_args="-eo user,pid")["Processes"]]
    except Exception:  # the container ended
        pids = []
    return upper_bytes(upper) + deleted_open_bytes(pids)


async def attack(name: str, disk: str) -> dict[str, object]:
    box = await Sandbox.create(SandboxConfig(run_id="bench-disk-overshoot", cpus=1.0, memory="2g", disk=disk))
    try:
        box.container.reload()
        graph = box.container.attrs["GraphDriver"]
        upper = f"btrfs:{btrfs_subvolume(box)}" if graph["Name"] == "btrfs" else graph["Data"]["UpperDir"]
        base = on_disk(box, upper)
        peak, done = 0, asyncio.Event()

        async def sample() -> None:
            nonlocal peak
            while not done.is_set():
                peak = max(peak, await asyncio.to_thread(on_disk, box, upper) - base)
                await asyncio.sleep(0.25)

        sampler = asyncio.create_task(sample())
        result = await box.run(command(name, disk), timeout=120)
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
            "counted_x": round((base + peak) / size_bytes(disk), 2) if upper.startswith("btrfs:") else None,
            "stopped": "never" not in result.output,
            "refused": any(full in result.output for full in FULL),  # a write failed inside: the quota
            "last_line": last,
        }
    finally:
        try:
            await box.destroy()
        except Exception as exc:  # dockerd's btrfs driver walks every folder before deleting: 250k can take minutes
            print(
                f"{name}: the container's removal did not return ({exc}); the engine goes on with it", file=sys.stderr
            )


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--disk", default="200m")
    parser.add_argument("--attacks", nargs="*", default=list(ATTACKS), choices=list(ATTACKS))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the container's upper folder is read on the host")
    if args.json:
        print(json.dumps([await attack(name, args.disk) for name in args.attacks], indent=1))
        return
    print(f"engine: {os.environ.get('DOCKER_HOST', 'default')}  limit {args.disk}")
    print("| attack | watch | peak MiB | peak / limit | counted / limit | after MiB | stopped | refused | last line |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in args.attacks:  # each row as it comes
        r = await attack(name, args.disk)
        counted = "-" if r["counted_x"] is None else r["counted_x"]
        print(
            f"| {r['attack']} | {r['watch']} | {r['peak_mib']} | {r['peak_x']} | {counted} "
            f"| {r['after_mib']} | {r['stopped']} | {r['refused']} | {r['last_line']} |",
            flush=True,
        )


if __name__ == "__main__":
    asyncio.run(main())
