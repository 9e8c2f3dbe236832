"""A fleet across hosts of a test's own (rigs/netns.py): each ``air fleet node`` (gate + stand-in env server)
in its own network namespace, its gate on that namespace's veth address; the spreader and the client in the
root namespace, so every episode crosses a link the test can cut. And a client that counts every reply."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import msgpack
import zmq
import zmq.asyncio

from air.fleet.folder import FleetFolder
from rigs.fleet import (
    Processes,
    figures,
    free_port,
    make_folder,
    node_command,
    remove_private,
    spread_command,
    wait_for,
)
from rigs.netns import Net
from rigs.patience import backstop


def node_on(net: Net, folder: FleetFolder, name: str, capacity: int) -> list[str]:
    """``air fleet node`` with a stand-in env server, run in ``net``'s namespace, its gate on ``net.address``."""
    command = node_command(folder, name, "--capacity", str(capacity))
    for flag in ("--host", "--bind"):  # the node's own address, not loopback
        command[command.index(flag) + 1] = net.address
    return net.command(command)


def nodes_up(folder: FleetFolder, names: list[str]) -> bool:
    found = figures(folder).get("nodes", {})
    return all(found.get(name, {}).get("state") == "up" for name in names)


@contextmanager
def fleet_on(
    tmp_path: Path,
    nets: list[Net],
    *,
    capacity: int = 4,
    spread_args: tuple[str, ...] = (),
    stub_env: dict[str, str] | None = None,
) -> Iterator[tuple[FleetFolder, Processes, str]]:
    """A fleet folder, node n<k> on ``nets[k-1]``, and a spreader on loopback; yields the folder, the processes
    and the spreader's address once every node is up. Stops them all before the namespaces go."""
    folder = make_folder(tmp_path / "fleet")
    processes = Processes(tmp_path / "logs")
    address = f"tcp://127.0.0.1:{free_port()}"
    names = [f"n{index}" for index in range(1, len(nets) + 1)]
    try:
        for name, net in zip(names, nets, strict=True):
            env = {"STUB_WIRE": "three", "STUB_NAME": name, **(stub_env or {})}
            processes.start(name, node_on(net, folder, name, capacity), env)
        processes.start("spreader", spread_command(folder, address, *spread_args))
        wait_for(lambda: nodes_up(folder, names), backstop(60), f"{len(nets)} env nodes up in their namespaces")
        addresses = {name: record.address for name, record in folder.records().items()}
        for name, net in zip(names, nets, strict=True):
            assert addresses[name].startswith(f"tcp://{net.address}:"), f"{name} is not on its own link: {addresses}"
        yield folder, processes, address
    finally:
        processes.stop_all()
        remove_private(folder)


@dataclass(frozen=True)
class Reply:
    request_id: str
    body: dict
    at: float  # time.monotonic() when it came

    @property
    def server(self) -> str | None:
        return (self.body.get("episode") or {}).get("server")


class CountingClient:
    """verifiers' EnvClient reduced to the wire (0.4's three frames), counting every final reply per request
    id: a second reply to one request is an episode delivered twice, which rigs.fleet.WireClient would drop
    unseen. ``run`` returns the first reply; ``twice()`` names what was answered other than once."""

    def __init__(self, address: str) -> None:
        self.ctx = zmq.asyncio.Context()
        self.socket = self.ctx.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)
        self.sent: list[bytes] = []
        self.known: set[bytes] = set()
        self.finals: Counter[bytes] = Counter()
        self.stray: list[bytes] = []  # replies to ids this client never sent
        self.waiting: dict[bytes, asyncio.Future] = {}
        self.receiver: asyncio.Task | None = None

    async def _receive(self) -> None:
        while True:
            request_id, kind, data = await self.socket.recv_multipart()
            if kind == b"delta":
                continue
            if request_id not in self.known:
                self.stray.append(request_id)
                continue
            self.finals[request_id] += 1
            future = self.waiting.pop(request_id, None)
            if future is not None and not future.done():
                future.set_result(Reply(request_id.decode(), msgpack.unpackb(data, raw=False), time.monotonic()))

    async def run(self, seconds: float, **task) -> Reply:
        if self.receiver is None:
            self.receiver = asyncio.create_task(self._receive())
        request_id = uuid.uuid4().hex.encode()
        self.sent.append(request_id)
        self.known.add(request_id)
        future = asyncio.get_running_loop().create_future()
        self.waiting[request_id] = future
        body = {"task_data": {"seconds": seconds, **task}}
        await self.socket.send_multipart([request_id, b"run", msgpack.packb(body, use_bin_type=True)])
        return await future

    def twice(self) -> dict[str, int]:
        """Request id -> final replies, for every request answered other than exactly once (and strays)."""
        odd = {rid.decode(): self.finals[rid] for rid in self.sent if self.finals[rid] != 1}
        return {**odd, **{f"stray {rid.decode()}": 1 for rid in self.stray}}

    async def close(self) -> None:
        if self.receiver is not None:
            self.receiver.cancel()
        self.socket.close(0)
        self.ctx.term()
