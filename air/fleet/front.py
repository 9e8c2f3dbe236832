"""``air fleet spread DIR --address ADDRESS``: the source's one address, held by a small relay that outlives
the spreader behind it.

prime-rl's orchestrator awaits an episode with no timeout, and ZMQ tells no one when a peer's process dies: an
episode held by a dead spreader would be awaited forever. So the address is held by this relay, which does one
thing: it passes each request to the spreader (:mod:`air.fleet.spreader`, a child process on a private ipc
socket) and each reply back, and remembers every request until its reply has passed. When the spreader dies
(killed, crashed) or has not answered the relay's pings for ``lost_after_s``, every request it held is answered
here at once, an episode as failed (prime-rl counts it failed and never trains on it), and a new spreader starts
on a fresh socket, so nothing sent to the old one reaches the new. The nodes cancel the runs the dead spreader
asked for once it has been silent that long (:mod:`air.fleet.gate`). The relay keeps no nodes, writes no files
and parses no episode, so little in it can fail; its own death is the one the orchestrator cannot be told of
(docs/decisions/0016-the-spreader-behind-a-relay.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field

import zmq
import zmq.asyncio

from air.fleet import wire
from air.fleet.folder import FleetFolder
from air.fleet.settings import SpreadSettings

log = logging.getLogger(__name__)
PING_ID = b"front-ping-"
WORKER_MODULE = "air.fleet.spread_worker"
REFUSED = 3  # the spreader's exit when it cannot start at all (keys, folder): starting it again cannot help
HEALTH_KEPT_S = 60.0  # a health poll no node answers is forgotten after this (the client polls again)
QUICK_DEATH_S = 10.0  # a spreader that dies this soon after its start, ...
QUICK_DEATHS = 5  # ... this many times in a row, is not started again: the relay stops, saying so
RESTART_DELAY_S = 0.2


@dataclass
class Held:
    """A client's request passed to the spreader and not yet answered."""

    client: bytes
    method: bytes
    received: float = field(default_factory=time.monotonic)


@dataclass
class Worker:
    """One start of the spreader: its process, the relay's socket to it, how it answers pings."""

    process: asyncio.subprocess.Process
    socket: zmq.asyncio.Socket
    started: float = field(default_factory=time.monotonic)
    last_pong: float = field(default_factory=time.monotonic)
    unanswered: int = 0


class Front:
    def __init__(self, folder: FleetFolder, address: str, source: str, settings: SpreadSettings | None = None) -> None:
        self.folder, self.source = folder, source
        self.settings = settings or SpreadSettings()
        folder.key_pair("client")  # an unreadable key is refused here, in one line, rather than at every start
        folder.key_pair("node")
        self.ctx = zmq.asyncio.Context()
        self.front = self.ctx.socket(zmq.ROUTER)
        for option, value in ((zmq.ROUTER_MANDATORY, 1), (zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            self.front.setsockopt(option, value)
        self.front.bind(address)
        self.address = self.front.getsockopt_string(zmq.LAST_ENDPOINT)
        self.private = tempfile.mkdtemp(prefix=f"air-spread-{os.getuid()}-")  # 0700: the spreader's socket
        self.held: dict[bytes, Held] = {}
        self.wire: wire.Wire | None = None
        self.worker: Worker | None = None  # None while one is being started: requests wait in `waiting`
        self.waiting: list[list[bytes]] = []
        self._lifeline: int | None = None
        self.starts = 0
        self.failed_by_deaths = 0  # episodes answered failed here because their spreader died
        self._ids = itertools.count()

    # -- the loop ----------------------------------------------------------------------------------------------

    async def run(self) -> int:
        """Relay until SIGTERM or SIGINT; 0 then, else the exit of a spreader that could not be kept running."""
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, stop.set)
        log.info("spreader for source %r at %s (its relay: pid %d)", self.source, self.address, os.getpid())
        relaying = asyncio.create_task(self._from_clients())
        try:
            return await self._supervise(stop)
        finally:
            relaying.cancel()
            await self._fail_held("the spreader stopped")
            self.close()

    async def _supervise(self, stop: asyncio.Event) -> int:
        quick_deaths = 0
        while True:
            self.worker = worker = await self._start_worker()
            for frames in self.waiting:
                await worker.socket.send_multipart(frames)
            self.waiting.clear()
            reading = asyncio.create_task(self._from_worker(worker))
            pinging = asyncio.create_task(self._ping(worker))
            stopping = asyncio.create_task(stop.wait())
            ended = asyncio.create_task(worker.process.wait())
            await asyncio.wait({stopping, ended}, return_when=asyncio.FIRST_COMPLETED)
            pinging.cancel()
            if stop.is_set():  # its own "the spreader stopped" answers pass back through us while it ends
                await self._end(worker)
                reading.cancel()
                return 0
            stopping.cancel()
            code = worker.process.returncode
            self.worker = None
            reading.cancel()
            worker.socket.close(linger=0)
            if code == 0:  # it stopped as asked (a Ctrl-C reaches both of us): so do we
                return 0
            lived = time.monotonic() - worker.started
            failed = await self._fail_held(f"the spreader died ({_exit(code)})")
            self.failed_by_deaths += failed
            log.error(
                "the spreader died (%s) after %.1f s: %d episodes in flight answered as failed; starting it again",
                _exit(code),
                lived,
                failed,
            )
            if code == REFUSED:
                return code
            quick_deaths = quick_deaths + 1 if lived < QUICK_DEATH_S else 0
            if quick_deaths >= QUICK_DEATHS:
                log.error("the spreader died %d times within %.0f s of starting: not again (its log is above)",
                          quick_deaths, QUICK_DEATH_S)  # fmt: skip
                return 1
            await asyncio.sleep(RESTART_DELAY_S)

    async def _start_worker(self) -> Worker:
        self.starts += 1
        address = f"ipc://{self.private}/spreader-{self.starts}.sock"  # a fresh one: nothing old is delivered
        spec = {
            "folder": str(self.folder.root),
            "address": address,
            "public_address": self.address,
            "source": self.source,
            "settings": self.settings.model_dump(),
            "starts": {"spreader_starts": self.starts, "failed_by_spreader_deaths": self.failed_by_deaths},
        }
        if self._lifeline is not None:
            os.close(self._lifeline)
        lifeline, self._lifeline = os.pipe()  # the spreader ends itself when this relay is gone (its end closes)
        os.set_inheritable(self._lifeline, False)
        try:
            process = await asyncio.create_subprocess_exec(
                sys.executable, "-m", WORKER_MODULE, json.dumps(spec), str(lifeline), pass_fds=(lifeline,)
            )
        finally:
            os.close(lifeline)
        socket = self.ctx.socket(zmq.DEALER)
        for option, value in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            socket.setsockopt(option, value)
        socket.connect(address)  # requests queue here until the spreader binds
        return Worker(process=process, socket=socket)

    async def _end(self, worker: Worker, grace_s: float = 30.0) -> None:
        self.worker = None  # what comes in meanwhile waits, and is answered "stopped" with the rest
        with contextlib.suppress(ProcessLookupError):
            worker.process.terminate()
        try:
            await asyncio.wait_for(worker.process.wait(), grace_s)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                worker.process.kill()
            await worker.process.wait()
        await asyncio.sleep(0.1)  # its last answers, already on the socket, pass back
        worker.socket.close(linger=0)

    # -- the relay -------------------------------------------------------------------------------------------

    async def _from_clients(self) -> None:
        while True:
            frames = await self.front.recv_multipart()
            if len(frames) != 4:
                continue
            client, request_id, method, payload = frames
            if request_id in self.held:  # ids are uuids: a second one in flight is a client's error, not ours
                log.warning("a request id already in flight was sent again: dropped")
                continue
            self.held[request_id] = Held(client, method)
            if self.worker is None:
                self.waiting.append([request_id, method, payload])
            else:
                await self.worker.socket.send_multipart([request_id, method, payload])

    async def _from_worker(self, worker: Worker) -> None:
        while True:
            request_id, *rest = await worker.socket.recv_multipart(copy=False)
            request_id = request_id.bytes
            if request_id.startswith(PING_ID):
                worker.last_pong, worker.unanswered = time.monotonic(), 0
                with contextlib.suppress(Exception):  # the wire a failure of ours is worded in, once a node said
                    self.wire = self.wire or wire.Wire[wire.unpack(rest[0].bytes)["wire"]]
                continue
            final = wire.is_final(rest)
            held = self.held.pop(request_id, None) if final else self.held.get(request_id)
            if held is None:
                continue
            if final and self.wire is None:
                self.wire = wire.wire_of(rest)
            with contextlib.suppress(zmq.ZMQError):  # the client left: nobody to tell
                await self.front.send_multipart([held.client, request_id, *rest], copy=False)

    async def _ping(self, worker: Worker) -> None:
        """A spreader that stops answering (frozen, its loop stuck) is ended like a dead one."""
        while True:
            await asyncio.sleep(self.settings.probe_interval_s)
            self._forget_old_polls()
            worker.unanswered += 1
            await worker.socket.send_multipart([PING_ID + str(next(self._ids)).encode(), wire.PING, b""])
            silent = time.monotonic() - worker.last_pong
            if self.settings.silent_too_long(silent, worker.unanswered):
                log.error("the spreader has not answered for %.1f s: ending it", silent)
                with contextlib.suppress(ProcessLookupError):
                    worker.process.kill()
                return

    def _forget_old_polls(self) -> None:
        """The spreader leaves a health poll unanswered while no node is up: do not hold those forever."""
        now = time.monotonic()
        for request_id, held in list(self.held.items()):
            if held.method == wire.HEALTH and now - held.received > HEALTH_KEPT_S:
                del self.held[request_id]

    async def _fail_held(self, why: str) -> int:
        """Answer every request the spreader held; returns how many episodes were answered as failed."""
        held, self.held = self.held, {}
        episodes = 0
        for request_id, request in held.items():
            if request.method == wire.RUN:
                episodes += 1
                body = {"success": False, "error": f"{why}: the episode failed, not trained on"}
            elif request.method == wire.CANCEL:
                body = {"success": True, "error": None, "cancelled": False}
            else:
                continue  # a health poll: the client asks again
            if self.wire is None:  # nothing has passed back yet, so no episode can have been sent
                continue
            with contextlib.suppress(zmq.ZMQError):
                await self.front.send_multipart([request.client, request_id, *wire.reply(self.wire, body)])
        return episodes

    def close(self) -> None:
        if self.worker is not None:
            self.worker.socket.close(linger=0)
        if self._lifeline is not None:
            os.close(self._lifeline)
        self.front.close(linger=0)
        self.ctx.term()
        shutil.rmtree(self.private, ignore_errors=True)


def _exit(code: int | None) -> str:
    if code is not None and code < 0:
        return f"signal {signal.Signals(-code).name}"
    return f"exit {code}"
