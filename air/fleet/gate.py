"""An env node's one door: a CURVE-secured ROUTER in front of its env server, which listens on a private
socket only this user can reach.

Only a peer holding the run's client key gets past the handshake (pyzmq's ZAP authenticator with one
allowed key); a refused peer's frames never reach the socket, so nothing is run or read for it. Admitted
frames go to the env server untouched and its replies go back to whoever asked, in either generation of
verifiers' wire (:mod:`air.fleet.wire`). The gate answers the spreader's ``air-status`` itself: how long since
its env server and its Docker engine last answered, what runs, how many containers it holds, and whether
it is *sick* (its engine or env server failing): then it tells the spreaders that probe it at once, without
waiting for their next probe, and before it passes on the end of an episode it asks its engine again, so an
episode that ended because the engine died never frees room for a new one on this node. A spreader that
stopped probing for its own ``lost_after_s`` is gone (killed, cut off): the runs it asked for are cancelled
here, so no abandoned episode keeps its container.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import msgpack
import zmq
import zmq.asyncio
from zmq.auth.asyncio import AsyncioAuthenticator

from air.fleet import wire
from air.fleet.folder import KeyPair
from air.fleet.settings import GateSettings

log = logging.getLogger(__name__)
OWN = b"gate-"  # request ids of the gate's own requests to its env server
DEFAULT_LOST_AFTER_S = 10.0  # a prober that does not say its own


@dataclass
class Prober:
    """A spreader that asks this gate how it is: its last probe's id (a pushed status reuses it) and time."""

    last_id: bytes
    seen: float
    lost_after_s: float


def _lost_after(payload: bytes) -> float:
    try:
        value = float(wire.unpack(payload).get("lost_after_s", DEFAULT_LOST_AFTER_S))
    except (ValueError, TypeError, AttributeError, msgpack.UnpackException):
        return DEFAULT_LOST_AFTER_S
    return min(max(value, 0.1), 3600.0)


class Gate:
    def __init__(
        self,
        node_keys: KeyPair,
        client_public: bytes,
        inner_address: str,
        settings: GateSettings | None = None,
        engine_check: Callable[[], bool] | None = None,
        containers: Callable[[], int | None] | None = None,
    ) -> None:
        self.settings = settings or GateSettings()
        self.engine_check = engine_check
        self.count_containers = containers
        self.ctx = zmq.asyncio.Context()
        self.allowed = wire.OnlyKey(client_public)
        self.auth = AsyncioAuthenticator(self.ctx)
        self.auth.start()
        self.auth.configure_curve_callback("*", credentials_provider=self.allowed)
        self.front = self.ctx.socket(zmq.ROUTER)
        for option, value in ((zmq.ROUTER_MANDATORY, 1), (zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            self.front.setsockopt(option, value)
        wire.curve_server(self.front, node_keys.public, node_keys.secret)
        self.inner = self.ctx.socket(zmq.DEALER)
        for option, value in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            self.inner.setsockopt(option, value)
        self.inner.connect(inner_address)
        self.pending: dict[bytes, tuple[bytes, bool]] = {}  # request id -> the peer that asked, whether a run
        self.probers: dict[bytes, Prober] = {}  # the spreaders that probe this gate, by peer
        self.wire: wire.Wire | None = None
        started = time.monotonic()
        self.inner_seen = started  # the env server's last answer (or the start, before its first)
        self.engine_seen = started
        self.inner_answered = False
        # Counted, not only timed: a gate that was itself descheduled for a while has sent nothing meanwhile,
        # and must not report its env server or engine silent on that account alone.
        self.inner_unanswered = 0  # health requests sent since its last answer
        self.engine_failed = 0  # engine checks in a row that failed
        self.containers: int | None = None
        self.sick = ""  # why nothing new should come here now, or ""
        self.orphans_cancelled = 0  # runs cancelled because the spreader that asked for them went silent
        self._ids = itertools.count()
        self._engine_asked: asyncio.Task | None = None
        self._holding: set[asyncio.Task] = set()  # episode ends waiting for an engine check
        self._engine_asked_at = 0.0

    def bind(self, address: str) -> str:
        """Bind the door (``tcp://*:0`` takes a free port); returns the endpoint bound."""
        self.front.bind(address)
        return self.front.getsockopt_string(zmq.LAST_ENDPOINT)

    def _own_id(self) -> bytes:
        return OWN + str(next(self._ids)).encode()

    def status(self) -> dict:
        now = time.monotonic()
        return {
            "inner_answered": self.inner_answered,
            "inner_silent_s": round(now - self.inner_seen, 3),
            "inner_unanswered": self.inner_unanswered,
            "engine_silent_s": round(now - self.engine_seen, 3) if self.engine_check else 0.0,
            "engine_failed_checks": self.engine_failed,
            "wire": self.wire.name if self.wire else None,
            "running": len(self.pending),
            "containers": self.containers,
            "refused": self.allowed.refused,
            "sick": self.sick,
            "orphans_cancelled": self.orphans_cancelled,
        }

    def _diagnose(self) -> str:
        """Why this node should get no new episode now: one failed engine check is enough (a dead engine's
        socket refuses at once); its env server must have missed two health checks (a busy one answers late)."""
        if self.engine_failed:
            return f"its Docker engine failed {self.engine_failed} checks in a row"
        if self.inner_unanswered > 2:
            return f"its env server did not answer {self.inner_unanswered - 1} health checks"
        return ""

    async def _update_sick(self) -> None:
        sick = self._diagnose()
        if sick == self.sick:
            return
        self.sick = sick
        if sick:
            log.warning("this node is sick (%s): it asks for no new episodes", sick)
        else:
            log.info("this node is healthy again")
        body = wire.pack(self.status())
        for peer, prober in list(self.probers.items()):  # at once: a probe may be a second away
            await self._send(peer, prober.last_id, [body])

    async def run(self) -> None:
        checks = asyncio.create_task(self._check_forever())
        try:
            poller = zmq.asyncio.Poller()
            poller.register(self.front, zmq.POLLIN)
            poller.register(self.inner, zmq.POLLIN)
            while True:
                events = dict(await poller.poll())
                if self.front in events:
                    await self._from_peer(await self.front.recv_multipart(copy=False))
                if self.inner in events:
                    await self._from_server(await self.inner.recv_multipart(copy=False))
        finally:
            checks.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await checks

    async def _from_peer(self, frames: list) -> None:
        if len(frames) != 4:
            log.warning("dropped a message of %d frames from an admitted peer", len(frames))
            return
        peer, request_id, method, payload = (frame.bytes for frame in frames)
        if method == wire.STATUS:
            self.probers[peer] = Prober(request_id, time.monotonic(), _lost_after(payload))
            await self._send(peer, request_id, [wire.pack(self.status())])
        elif method == wire.FORGET:
            for target in wire.unpack(payload).get("request_ids", []):
                body = wire.pack({"request_id": str(target)})
                await self.inner.send_multipart([self._own_id(), wire.CANCEL, body])
        elif request_id.startswith(OWN):
            log.warning("dropped a request whose id imitates the gate's own")
        else:
            self.pending[request_id] = (peer, method == wire.RUN)
            await self.inner.send_multipart([request_id, method, payload])

    async def _from_server(self, frames: list) -> None:
        request_id, rest = frames[0].bytes, frames[1:]
        if request_id.startswith(OWN):
            self.inner_seen = time.monotonic()
            self.inner_answered, self.inner_unanswered = True, 0
            self.wire = self.wire or wire.wire_of(rest)
            return
        final = wire.is_final(rest)
        asked = self.pending.pop(request_id, None) if final else self.pending.get(request_id)
        if asked is None:
            return
        peer, is_run = asked
        if final and is_run and self.engine_check is not None:
            # Its end frees room here: first make sure the engine still answers, so that the spreader hears
            # "sick" before this reply (one connection keeps order) and sends nothing new to a dead engine.
            task = asyncio.create_task(self._send_after_engine_check(peer, request_id, rest))
            self._holding.add(task)  # a reference, so the loop cannot drop it half done
            task.add_done_callback(self._holding.discard)
            return
        await self._send(peer, request_id, rest)

    async def _send_after_engine_check(self, peer: bytes, request_id: bytes, rest: list) -> None:
        await self._check_engine(since=time.monotonic())
        await self._update_sick()
        await self._send(peer, request_id, rest)

    async def _send(self, peer: bytes, request_id: bytes, rest: list) -> None:
        try:
            await self.front.send_multipart([peer, request_id, *rest], copy=False)
        except zmq.ZMQError as exc:  # the peer is gone (a spreader restarted): its reply has no one to go to
            log.info("a reply to a peer that left was dropped (%s)", exc)

    async def _check_engine(self, since: float) -> None:
        """One engine check begun at or after ``since``: episodes that end together share one."""
        if self._engine_asked is None or self._engine_asked_at < since:
            self._engine_asked_at = time.monotonic()
            self._engine_asked = asyncio.create_task(self._ask_engine())
        await asyncio.shield(self._engine_asked)

    async def _ask_engine(self) -> None:
        answered = False
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.settings.check_timeout_s):
                answered = await asyncio.to_thread(self.engine_check)
        if answered:
            self.engine_seen, self.engine_failed = time.monotonic(), 0
        else:
            self.engine_failed += 1

    async def _check_forever(self) -> None:
        while True:
            self.inner_unanswered += 1
            await self.inner.send_multipart([self._own_id(), wire.HEALTH, wire.pack({})])
            if self.engine_check is not None:
                await self._check_engine(since=time.monotonic())
                if not self.engine_failed and self.count_containers is not None:
                    with contextlib.suppress(Exception):  # a count is a figure, never a reason to stop
                        self.containers = await asyncio.to_thread(self.count_containers)
            await self._update_sick()
            await self._cancel_orphans()
            await asyncio.sleep(self.settings.check_interval_s)

    async def _cancel_orphans(self) -> None:
        """Cancel the runs of every spreader that stopped probing for its lost_after_s: it died or was cut off,
        and its replacement (a new connection) can never be answered for them."""
        now = time.monotonic()
        for peer, prober in list(self.probers.items()):
            if now - prober.seen <= prober.lost_after_s + self.settings.check_interval_s:
                continue
            del self.probers[peer]
            runs = [request_id for request_id, (asker, is_run) in self.pending.items() if asker == peer and is_run]
            if runs:
                log.warning("a spreader went silent %.1f s ago: cancelling its %d runs", now - prober.seen, len(runs))
            for request_id in runs:  # their "cancelled" replies still go to it, should it be alive after all
                body = wire.pack({"request_id": request_id.decode(errors="replace")})
                await self.inner.send_multipart([self._own_id(), wire.CANCEL, body])
                self.orphans_cancelled += 1

    def close(self) -> None:
        self.auth.stop()
        self.front.close(linger=0)
        self.inner.close(linger=0)
        self.ctx.term()
