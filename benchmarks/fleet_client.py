"""The fleet benchmarks' own client and figures (benchmarks/fleet.py and fleet_scale.py share them): verifiers'
wire spoken as its EnvClient speaks it, noting each episode's server and latency; percentiles; CPU seconds."""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass, field

import msgpack
import psutil
import zmq
import zmq.asyncio

from rigs.fleet import figures


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def dist(values: list[float], scale: float = 1000.0) -> dict:
    """p50, p90, p99, max (ms by default) and the count."""
    return {
        "p50": round(pct(values, 0.5) * scale, 2),
        "p90": round(pct(values, 0.9) * scale, 2),
        "p99": round(pct(values, 0.99) * scale, 2),
        "max": round(max(values) * scale, 2),
        "n": len(values),
    }


def cpu_s(*processes: psutil.Process) -> float:
    """User + system seconds of these processes (and of their children, gone ones not counted)."""
    total = 0.0
    for process in processes:
        for one in (process, *process.children(recursive=True)):
            try:
                times = one.cpu_times()
            except psutil.NoSuchProcess:
                continue
            total += times.user + times.system
    return total


def nodes_up(folder, count: int) -> bool:
    found = figures(folder).get("nodes", {})
    return len(found) == count and all(node["state"] == "up" for node in found.values())


@dataclass
class Episode:
    sent: float
    reply: asyncio.Future
    server: str = ""  # the stand-in's delta names the server that runs it
    answered: float = 0.0

    @property
    def latency(self) -> float:
        return self.answered - self.sent


@dataclass
class Client:
    """verifiers' wire as its EnvClient speaks it (one DEALER, no high-water mark), noting which server each
    episode runs on (from the stand-in's ``delta``) and when its reply came."""

    address: str
    ctx: zmq.asyncio.Context = field(default_factory=zmq.asyncio.Context)
    episodes: dict[bytes, Episode] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.socket = self.ctx.socket(zmq.DEALER)
        for option, value in ((zmq.LINGER, 0), (zmq.SNDHWM, 0), (zmq.RCVHWM, 0)):
            self.socket.setsockopt(option, value)
        self.socket.connect(self.address)
        self.receiver: asyncio.Task | None = None

    async def _receive(self) -> None:
        while True:
            request_id, kind, data = await self.socket.recv_multipart()
            episode = self.episodes.get(request_id)
            if episode is None:
                continue
            if kind == b"delta":
                episode.server = msgpack.unpackb(data, raw=False)["server"]
                continue
            episode.answered = time.perf_counter()
            del self.episodes[request_id]
            episode.reply.set_result(msgpack.unpackb(data, raw=False))

    async def start(self, seconds: float) -> Episode:
        if self.receiver is None:
            self.receiver = asyncio.create_task(self._receive())
        request_id = uuid.uuid4().hex.encode()
        payload = msgpack.packb({"task_data": {"seconds": seconds}}, use_bin_type=True)
        episode = Episode(time.perf_counter(), asyncio.get_running_loop().create_future())
        self.episodes[request_id] = episode
        await self.socket.send_multipart([request_id, b"run", payload])
        return episode

    async def run(self, seconds: float) -> Episode:
        episode = await self.start(seconds)
        await episode.reply
        return episode

    def close(self) -> None:
        if self.receiver is not None:
            self.receiver.cancel()
        self.socket.close(0)
        self.ctx.term()


async def wave(client: Client, count: int, concurrent: int, seconds: float) -> list[Episode]:
    """``count`` episodes, ``concurrent`` at a time; every one must succeed."""
    slots = asyncio.Semaphore(concurrent)

    async def one() -> Episode:
        async with slots:
            return await client.run(seconds)

    done = await asyncio.gather(*(one() for _ in range(count)))
    failed = [e.reply.result() for e in done if not e.reply.result()["success"]]
    assert not failed, f"{len(failed)} episodes failed: {failed[0]}"
    return done
