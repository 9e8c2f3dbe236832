"""``python -m air.fleet.spread_worker SPEC LIFELINE``: the spreader itself, as the relay of
``air fleet spread DIR --address ADDRESS`` (:mod:`air.fleet.front`) starts it: on a private socket, ending
itself when the relay is gone (the pipe LIFELINE closes), and first in line for the kernel's OOM killer, so
that memory runs out here, where a death is survived, rather than in the relay."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import sys
import threading

from air.fleet.errors import FleetError
from air.fleet.folder import FleetFolder
from air.fleet.front import REFUSED
from air.fleet.settings import SpreadSettings
from air.fleet.spreader import Spreader
from air.sandbox.neutral import log_to_stderr


def _end_with_relay(fd: int) -> None:
    def watch() -> None:
        with contextlib.suppress(OSError):
            while os.read(fd, 1):
                pass
        os.kill(os.getpid(), signal.SIGTERM)  # the relay is gone: nobody can be answered

    threading.Thread(target=watch, name="relay-watch", daemon=True).start()


def _first_for_oom() -> None:
    with contextlib.suppress(OSError):  # raising one's own score needs no privilege
        with open("/proc/self/oom_score_adj", "w") as handle:
            handle.write("500")


async def _serve(spreader: Spreader) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    running = asyncio.create_task(spreader.run())
    await asyncio.wait({running, asyncio.create_task(stop.wait())}, return_when=asyncio.FIRST_COMPLETED)
    running.cancel()  # its finally answers what it held: "the spreader stopped"
    with contextlib.suppress(asyncio.CancelledError):
        await running


def main(argv: list[str]) -> int:
    spec, lifeline = json.loads(argv[0]), int(argv[1])
    _end_with_relay(lifeline)
    _first_for_oom()
    log_to_stderr(logging.INFO)  # an env node's reasons for being sick or lost come from that node
    try:
        spreader = Spreader(
            FleetFolder(spec["folder"]),
            spec["address"],
            spec["source"],
            SpreadSettings.model_validate(spec["settings"]),
            public_address=spec["public_address"],
            starts=spec["starts"],
        )
    except FleetError as exc:
        print(f"air fleet spread: {exc}", file=sys.stderr)
        return REFUSED
    asyncio.run(_serve(spreader))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
