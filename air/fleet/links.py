"""One env node as the spreader sees it: its connection, its state, what runs on it and what it did."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from enum import StrEnum

import zmq
import zmq.asyncio

from air.fleet import wire
from air.fleet.folder import KeyPair, NodeRecord


class NodeState(StrEnum):
    JOINING = "joining"  # recorded, not yet answered healthy: nothing is sent to it
    UP = "up"
    SICK = "sick"  # answers, but says its engine or env server fails: nothing new goes to it, its runs go on
    LOST = "lost"  # silent, or its engine or env server is: its runs were failed, nothing new goes to it
    LEAVING = "leaving"  # its record is gone (it stopped): nothing new goes to it, its last runs may finish


@dataclass
class Request:
    """A client's request the spreader holds: queued, or in flight on a node."""

    client: bytes
    request_id: bytes
    method: bytes
    payload: bytes
    received: float = field(default_factory=time.monotonic)

    @property
    def is_episode(self) -> bool:
        return self.method == wire.RUN


@dataclass
class Link:
    record: NodeRecord
    socket: zmq.asyncio.Socket
    state: NodeState = NodeState.JOINING
    last_answer: float = field(default_factory=time.monotonic)
    joined_at: float = field(default_factory=time.monotonic)
    status: dict = field(default_factory=dict)
    unanswered: int = 0  # status probes sent since its last answer
    in_flight: dict[bytes, Request] = field(default_factory=dict)
    running: int = 0  # the episodes among in_flight, kept as they come and go: the choice reads it per dispatch
    given_up: list[bytes] = field(default_factory=list)  # failed while lost: cancelled there on rejoin
    sent: int = 0  # episodes sent to it
    done: int = 0  # episodes it answered (ok or not: the env's verdict travels in the reply)
    failed: int = 0  # episodes failed here because the node was lost or left
    losses: int = 0
    late: int = 0  # replies that came after their episode was failed: dropped
    reason: str = ""

    @property
    def name(self) -> str:
        return self.record.name

    def episodes(self) -> int:
        return self.running

    def capacity(self, cap: int | None) -> int:
        return min(self.record.capacity, cap) if cap else self.record.capacity

    def figures(self) -> dict:
        containers = self.status.get("containers")  # the node's running containers: in use and warm
        warm = None if containers is None else max(0, containers - int(self.status.get("running") or 0))
        return {
            "state": self.state.value,
            "address": self.record.address,
            "running": self.episodes(),
            "sent": self.sent,
            "done": self.done,
            "failed": self.failed,
            "losses": self.losses,
            "late_replies_dropped": self.late,
            "containers": containers,
            "warm_containers": warm,
            "wire": self.status.get("wire"),  # its env server's verifiers (a60a606: TWO_FRAMES, 0.4: THREE_FRAMES)
            "capacity": self.record.capacity,
            "gpus": self.record.gpus,
            "reason": self.reason,
        }


def connect(ctx: zmq.asyncio.Context, record: NodeRecord, client: KeyPair, node_public: bytes) -> zmq.asyncio.Socket:
    """A fresh DEALER to a node's gate: nothing queued on an older one is ever delivered through it."""
    socket = ctx.socket(zmq.DEALER)
    # CONNECT_TIMEOUT: a connect begun while the route was gone waits on SYNs the kernel sends ever further
    # apart (1, 3, 7, 15 s...); dropped after 1 s and begun again, a healed node is reached within ~1.2 s.
    options = ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0), (zmq.RECONNECT_IVL, 200), (zmq.CONNECT_TIMEOUT, 1000))
    for option, value in options:
        socket.setsockopt(option, value)
    wire.curve_client(socket, client.public, client.secret, node_public)
    socket.connect(record.address)
    return socket


def least_busy(links: list[Link], cap: int | None) -> Link | None:
    """The up node with room whose share of its capacity in use is lowest (fewest running breaks ties)."""
    best, best_key = None, None
    for link in links:
        if link.state is not NodeState.UP:
            continue
        running, room = link.episodes(), link.capacity(cap)
        if running >= room:
            continue
        key = (running / room, running, link.name)
        if best_key is None or key < best_key:
            best, best_key = link, key
    return best
