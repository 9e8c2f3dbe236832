"""Blocks `fallocate -n` reserves on the host's disk against a sandbox's disk limit, over time: how many at the peak,
and how long they stay once the watch stops the agent (the stop frees what is reserved past the files' ends).

    sudo uv run python benchmarks/disk_fallocate.py [--json] [--disk 200m] [--gib 2] [--files 3] [--runs 3]

Root: it reads the container's upper folder (``GraphDriver.Data.UpperDir``) on the host. Per run, one sandbox
(cpus 1, memory 2g, ``--disk``) and one command of the agent's: ``--files`` files each reserving ``--gib`` GiB
past its end (``touch f && fallocate -n -l SIZE f``), one more held open by the agent's shell after deleting it,
then ``sleep 10; echo never``. Sampled every 0.05 s from the command's start until 10 s after it returned: the
upper folder's blocks (``du -s --block-size=1``) plus the blocks of files the container's processes hold open
after deleting them. Per run: ``peak`` (MiB), ``over_s`` (seconds from the first sample over the limit to the first
back under it: how long the reservation stayed on the host's disk), ``held_at_return`` (MiB when the halted command
returned), ``held_after_stop`` (MiB once a next command ran: it waits for the stop, kill then free, to end) and
``held_end`` (MiB 10 s later), and whether the watch stopped it.
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

from air.sandbox.config import SandboxConfig, size_bytes  # noqa: E402
from air.sandbox.container import Sandbox  # noqa: E402
from benchmarks.disk_overshoot import deleted_open_bytes, upper_bytes  # noqa: E402

SAMPLE_S = 0.05


def attack(files: int, gib: int) -> str:
    return (
        f"for i in $(seq {files}); do touch f$i && fallocate -n -l {gib}G f$i || break; done; "
        f"exec 3> held; fallocate -n -l {gib}G held; rm held; sleep 10; echo never"
    )


def on_disk(upper: str, pids: list[int]) -> int:
    """The container's bytes on the host's disk: its upper folder's blocks and its deleted-but-open files'."""
    return upper_bytes(upper) + deleted_open_bytes(pids)


def pids_of(box: Sandbox) -> list[int]:
    try:
        return [int(row[0]) for row in box.container.top(ps_args="-eo pid")["Processes"]]
    except Exception:  # the container ended
        return []


async def one_run(disk: str, files: int, gib: int) -> dict[str, object]:
    box = await Sandbox.create(SandboxConfig(run_id="bench-disk-fallocate", cpus=1.0, memory="2g", disk=disk))
    limit = size_bytes(disk)
    try:
        box.container.reload()
        upper = box.container.attrs["GraphDriver"]["Data"]["UpperDir"]
        base = on_disk(upper, pids_of(box))
        samples: list[tuple[float, int]] = []
        done = asyncio.Event()
        start = time.monotonic()

        async def sample() -> None:
            pids: list[int] = []
            while not done.is_set():
                if len(samples) % 20 == 0:  # the processes change rarely; `top` costs an engine call
                    pids = await asyncio.to_thread(pids_of, box)
                used = await asyncio.to_thread(on_disk, upper, pids)
                samples.append((time.monotonic() - start, used - base))
                await asyncio.sleep(SAMPLE_S)

        sampler = asyncio.create_task(sample())
        result = await box.run(attack(files, gib), timeout=120)
        returned = on_disk(upper, pids_of(box)) - base
        await box.run("true", timeout=60)  # waits for the shell: for the stop (kill, free) to end
        after = on_disk(upper, pids_of(box)) - base
        await asyncio.sleep(10)
        done.set()
        await sampler
        end = on_disk(upper, pids_of(box)) - base
        over = [t for t, used in samples if used > limit]
        back = [t for t, used in samples if over and t > over[0] and used <= limit]
        return {
            "peak_mib": round(max(used for _, used in samples) / 2**20, 1),
            "over_s": round(back[0] - over[0], 2) if back else None,
            "held_at_return_mib": round(returned / 2**20, 1),
            "held_after_stop_mib": round(after / 2**20, 1),
            "held_end_mib": round(end / 2**20, 1),
            "stopped": "never" not in result.output,
            "samples": len(samples),
        }
    finally:
        await box.destroy()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--disk", default="200m")
    parser.add_argument("--gib", type=int, default=2)
    parser.add_argument("--files", type=int, default=3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if os.geteuid() != 0:
        sys.exit("run as root: the container's upper folder is read on the host")
    rows = [await one_run(args.disk, args.files, args.gib) for _ in range(args.runs)]
    if args.json:
        print(json.dumps(rows, indent=1))
        return
    print(f"engine: {os.environ.get('DOCKER_HOST', 'default')}  limit {args.disk}  {args.files + 1} x {args.gib} GiB")
    print(
        "| run | peak MiB | over the limit for (s) | at the return MiB | after the stop MiB | 10 s later MiB "
        "| stopped |"
    )
    print("|---|---|---|---|---|---|---|")
    for number, r in enumerate(rows, 1):
        print(
            f"| {number} | {r['peak_mib']} | {r['over_s']} | {r['held_at_return_mib']} | {r['held_after_stop_mib']} "
            f"| {r['held_end_mib']} "
            f"| {r['stopped']} |"
        )
    spans = [r["over_s"] for r in rows if r["over_s"] is not None]
    if spans:
        print(f"over the limit: median {statistics.median(spans):.2f} s, max {max(spans):.2f} s")


if __name__ == "__main__":
    asyncio.run(main())
