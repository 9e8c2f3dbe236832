"""One source's episodes over many env nodes: the spreader, which the relay of
``air fleet spread DIR --address ADDRESS`` (:mod:`air.fleet.front`) runs as a child process behind the one
address prime-rl's orchestrator knows.

Each episode goes to the least busy node that is up and has room, else waits in order. Every
``probe_interval_s`` each node is asked how it is; a node whose gate says it is sick (its Docker engine or env
server failing) gets nothing new at once, its runs going on, and is up again when it says it is healthy. One
silent for ``lost_after_s`` (or whose engine or env server is, that long) is lost: its episodes in flight are
answered at once as failed, which prime-rl counts as failed episodes and never trains on, and nothing new goes
to it. A lost node's connection is replaced, so nothing queued for it is delivered later; a reply that still
arrives for a failed episode is dropped. When the node answers healthy again it rejoins, and the runs given up
are cancelled there. Nodes are found in the fleet folder (:mod:`air.fleet.folder`), never configured by address.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
import time
from collections import deque

import zmq
import zmq.asyncio

from air.fleet import wire
from air.fleet.folder import FleetFolder, NodeRecord, write_atomic
from air.fleet.links import Link, NodeState, Request, connect, least_busy
from air.fleet.settings import SpreadSettings

log = logging.getLogger(__name__)
OWN = b"spread-"
ANSWERING = (NodeState.UP, NodeState.SICK, NodeState.LEAVING)  # states in which silence loses a node


class Spreader:
    def __init__(
        self,
        folder: FleetFolder,
        address: str,
        source: str,
        settings: SpreadSettings | None = None,
        public_address: str | None = None,
        starts: dict | None = None,
    ) -> None:
        self.folder, self.source = folder, source
        self.starts = starts or {}  # the relay's count of this spreader's starts and what they cost, for figures
        self.settings = settings or SpreadSettings()
        self.client_keys = folder.key_pair("client")
        self.node_public = folder.key_pair("node").public
        self.ctx = zmq.asyncio.Context()
        self.front = self.ctx.socket(zmq.ROUTER)
        for option, value in ((zmq.ROUTER_MANDATORY, 1), (zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            self.front.setsockopt(option, value)
        self.front.bind(address)
        self.address = public_address or self.front.getsockopt_string(zmq.LAST_ENDPOINT)
        self.links: dict[str, Link] = {}
        self.readers: dict[str, asyncio.Task] = {}
        self.queue: deque[Request] = deque()
        self.wire: wire.Wire | None = None
        self._ids = itertools.count()
        self._written = ""
        self._logged = 0.0

    # -- the loop ----------------------------------------------------------------------------------------------

    async def run(self) -> None:
        log.info("spreader for source %r at %s, nodes from %s", self.source, self.address, self.folder.nodes)
        probing = asyncio.create_task(self._probe_forever())
        try:
            while True:
                frames = await self.front.recv_multipart()
                if len(frames) != 4:
                    continue
                await self._from_client(Request(*frames))
        finally:
            probing.cancel()
            for task in self.readers.values():
                task.cancel()
            await self._fail_all("the spreader stopped")
            self.close()

    async def _from_client(self, request: Request) -> None:
        if request.method == wire.PING:  # the relay in front: this process works, and the wire its answers need
            await self._answer(request, [wire.pack({"wire": self.wire.name if self.wire else None})])
            return
        if request.method == wire.HEALTH:
            if self.wire is not None and any(link.state is NodeState.UP for link in self.links.values()):
                await self._answer(request, wire.reply(self.wire, {"success": True, "error": None}))
            return  # no node up: no answer, so the client's start-up poll goes on waiting
        if request.method == wire.CANCEL:
            await self._cancel(request)
            return
        self.queue.append(request)
        await self._dispatch()

    async def _cancel(self, request: Request) -> None:
        target = wire.cancel_target(request.payload)
        for queued in list(self.queue):
            if queued.request_id == target:
                self.queue.remove(queued)
                await self._answer_in_wire(request, {"success": True, "error": None, "cancelled": True})
                return
        for link in self.links.values():
            if target in link.in_flight:
                await self._send(link, request)
                return
        await self._answer_in_wire(request, {"success": True, "error": None, "cancelled": False})

    async def _dispatch(self) -> None:
        links = list(self.links.values())
        while self.queue:
            link = least_busy(links, self.settings.node_capacity)
            if link is None:
                return
            await self._send(link, self.queue.popleft())

    async def _send(self, link: Link, request: Request) -> None:
        link.in_flight[request.request_id] = request
        link.running += request.is_episode
        link.sent += request.is_episode
        await link.socket.send_multipart([request.request_id, request.method, request.payload])

    async def _read_node(self, link: Link, socket: zmq.asyncio.Socket) -> None:
        while True:
            frames = await socket.recv_multipart(copy=False)
            if socket is not link.socket:
                return  # replaced while this was waiting
            request_id, rest = frames[0].bytes, frames[1:]
            if request_id.startswith(OWN):
                await self._status_answer(link, wire.unpack(rest[0].bytes))
                continue
            request = link.in_flight.get(request_id)
            if request is None:
                link.late += 1
                continue
            if wire.is_final(rest):
                del link.in_flight[request_id]
                if request.is_episode:
                    link.done += 1
                    link.running -= 1
            await self._answer(request, rest)
            if not link.in_flight or self.queue:
                await self._dispatch()

    # -- nodes: found, probed, lost, back ------------------------------------------------------------------------

    async def _probe_forever(self) -> None:
        probe = wire.pack({"lost_after_s": self.settings.lost_after_s})  # the gate cancels our runs after that silence
        while True:
            await self._sync_records(self.folder.records())
            now = time.monotonic()
            for link in list(self.links.values()):
                link.unanswered += 1
                await link.socket.send_multipart([OWN + str(next(self._ids)).encode(), wire.STATUS, probe])
                if link.state in ANSWERING and (reason := self._trouble(link, now)):
                    await self._lose(link, reason)
            self._report()
            await asyncio.sleep(self.settings.probe_interval_s)

    def _trouble(self, link: Link, now: float) -> str:
        """Why the node counts as lost, or "": silence timed and counted (SpreadSettings.silent_too_long), or
        its gate saying its engine or env server has been silent that long."""
        limit, status = self.settings.lost_after_s, link.status
        if self.settings.silent_too_long(now - link.last_answer, link.unanswered):
            return f"no answer for {now - link.last_answer:.1f} s"
        if status.get("engine_silent_s", 0) > limit and status.get("engine_failed_checks", 0) >= 2:
            return f"its Docker engine has not answered for {status['engine_silent_s']:.1f} s"
        if status.get("inner_silent_s", 0) > limit and status.get("inner_unanswered", 0) >= 2:
            return f"its env server has not answered for {status['inner_silent_s']:.1f} s"
        return ""

    async def _status_answer(self, link: Link, status: dict) -> None:
        """A probe's answer, or a status the gate pushed when its node fell sick or recovered."""
        link.last_answer, link.status, link.unanswered = time.monotonic(), status, 0
        sick = str(status.get("sick") or "")
        if sick and link.state is NodeState.UP:
            log.warning("env node %s is sick (%s): nothing new goes to it", link.name, sick)
            link.state, link.reason = NodeState.SICK, sick
            return
        healthy = status.get("inner_answered") and status.get("wire") and not self._trouble(link, link.last_answer)
        if not healthy or sick or link.state not in (NodeState.JOINING, NodeState.LOST, NodeState.SICK):
            return
        self.wire = self.wire or wire.Wire[status["wire"]]
        if link.given_up:
            await link.socket.send_multipart(
                [OWN + b"forget", wire.FORGET, wire.pack({"request_ids": [rid.decode() for rid in link.given_up]})]
            )
            link.given_up = []
        back = {NodeState.JOINING: "is up", NodeState.LOST: "rejoined", NodeState.SICK: "is healthy again"}
        log.info("env node %s %s (%s)", link.name, back[link.state], link.record.address)
        link.state, link.reason = NodeState.UP, ""
        await self._dispatch()

    async def _lose(self, link: Link, reason: str) -> None:
        log.warning("env node %s lost: %s; %d episodes in flight on it failed", link.name, reason, link.episodes())
        link.state, link.reason = NodeState.LOST, reason
        link.losses += 1
        await self._fail_in_flight(link, f"env node {link.name} lost ({reason})")
        self._reconnect(link, link.record)

    async def _fail_in_flight(self, link: Link, why: str) -> None:
        for request in list(link.in_flight.values()):
            if request.is_episode:
                link.failed += 1
                link.given_up.append(request.request_id)
                await self._answer_in_wire(
                    request, {"success": False, "error": f"{why}: the episode failed, not trained on"}
                )
            else:
                await self._answer_in_wire(request, {"success": True, "error": None, "cancelled": False})
        link.in_flight.clear()
        link.running = 0

    async def _sync_records(self, records: dict[str, NodeRecord]) -> None:
        for name, record in records.items():
            link = self.links.get(name)
            if link is None:
                socket = connect(self.ctx, record, self.client_keys, self.node_public)
                self.links[name] = Link(record=record, socket=socket)
                self.readers[name] = asyncio.create_task(self._read_node(self.links[name], socket))
            elif (record.incarnation, record.address) != (link.record.incarnation, link.record.address):
                # a new start of the node: whatever ran on the old one is gone with it
                await self._fail_in_flight(link, f"env node {name} restarted")
                link.given_up = []
                self._reconnect(link, record)
                link.state, link.joined_at = NodeState.JOINING, time.monotonic()
        for name, link in list(self.links.items()):
            if name in records:
                continue
            if link.state is NodeState.LOST or not link.in_flight:
                log.info("env node %s left (its record is gone)", name)
                self._drop(link)
            elif link.state is not NodeState.LEAVING:
                link.state = NodeState.LEAVING  # its last runs may still answer; silence loses them

    def _reconnect(self, link: Link, record: NodeRecord) -> None:
        old, link.record = link.socket, record
        link.socket = connect(self.ctx, record, self.client_keys, self.node_public)
        link.last_answer, link.status, link.unanswered = time.monotonic(), {}, 0
        self.readers.pop(link.name).cancel()
        self.readers[link.name] = asyncio.create_task(self._read_node(link, link.socket))
        old.close(linger=0)

    def _drop(self, link: Link) -> None:
        self.readers.pop(link.name).cancel()
        link.socket.close(linger=0)
        del self.links[link.name]

    # -- answers and figures -------------------------------------------------------------------------------------

    async def _answer(self, request: Request, rest: list) -> None:
        with contextlib.suppress(zmq.ZMQError):  # the client left: nobody to tell
            await self.front.send_multipart([request.client, request.request_id, *rest], copy=False)

    async def _answer_in_wire(self, request: Request, body: dict) -> None:
        if self.wire is not None:
            await self._answer(request, wire.reply(self.wire, body))

    async def _fail_all(self, why: str) -> None:
        for link in self.links.values():
            await self._fail_in_flight(link, why)
        while self.queue:
            await self._answer_in_wire(
                self.queue.popleft(), {"success": False, "error": f"{why} before the episode ran"}
            )

    def figures(self) -> dict:
        nodes = {name: link.figures() for name, link in sorted(self.links.items())}
        return {
            "source": self.source,
            "address": self.address,
            "waiting": len(self.queue),
            **self.starts,
            "nodes": nodes,
        }

    def _report(self) -> None:
        figures = self.figures()
        text = json.dumps(figures, indent=2)
        if text != self._written:
            write_atomic(self.folder.figures_path(self.source), text)
            self._written = text
        now = time.monotonic()
        if now - self._logged >= self.settings.log_interval_s:
            self._logged = now
            for name, node in figures["nodes"].items():
                log.info(
                    "env node %s: %s, %d running, %d done, %d failed, %s warm containers",
                    name,
                    node["state"],
                    node["running"],
                    node["done"],
                    node["failed"],
                    node["warm_containers"],
                )
            if self.queue and not any(link.state is NodeState.UP for link in self.links.values()):
                log.warning("%d episodes wait: no env node is up (records in %s)", len(self.queue), self.folder.nodes)

    def close(self) -> None:
        for link in self.links.values():
            link.socket.close(linger=0)
        self.front.close(linger=0)
        self.ctx.term()
