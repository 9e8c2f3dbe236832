"""A fleet on loopback for tests and benchmarks: env nodes (``air fleet node`` processes, each with its own
env server), a spreader (``air fleet spread``), and a client speaking verifiers' wire as its EnvClient does."""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import msgpack
import zmq
import zmq.asyncio

from air.fleet.folder import FleetFolder
from rigs.patience import backstop

ROOT = Path(__file__).resolve().parents[1]
STUB = [sys.executable, "-m", "rigs.stub_env_server"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def containers(address: str | None, run_id: str) -> list[str]:
    """Names of a run's containers, stopped ones included, on the engine at ``address`` (None: the default)."""
    import docker

    client = (
        docker.DockerClient(base_url=address, timeout=backstop(30))
        if address
        else docker.from_env(timeout=backstop(30))
    )
    try:
        found = client.containers.list(all=True, filters={"label": f"air.run={run_id}"}, ignore_removed=True)
        return [container.name for container in found]
    finally:
        client.close()


async def outcomes(running: list[asyncio.Task], since: float) -> list[tuple[str, object, float]]:
    """Each episode as it ends: ("ok", what it returned, seconds since ``since``), or ("failed", the words of the
    RuntimeError verifiers' client raises for a failed reply, seconds)."""
    ended = []
    for task in asyncio.as_completed(running):
        try:
            ended.append(("ok", await task, time.monotonic() - since))
        except RuntimeError as exc:
            ended.append(("failed", str(exc), time.monotonic() - since))
    return ended


def make_folder(path: Path, env: dict | None = None) -> FleetFolder:
    folder = FleetFolder(path)
    folder.create(env or {"taskset": {"id": "stub"}})
    return folder


def _env(extra: dict[str, str]) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("AIR_", "SLURM"))}
    env["PYTHONPATH"] = str(ROOT)
    return {**env, **extra}


class Processes:
    """Processes started for a test, each stopped (and waited for) at the end, whatever happens."""

    def __init__(self, logs: Path) -> None:
        self.logs = logs
        self.started: dict[str, subprocess.Popen] = {}

    def start(self, name: str, command: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        self.logs.mkdir(parents=True, exist_ok=True)
        with open(self.logs / f"{name}.log", "ab") as log:
            process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=_env(env or {}), start_new_session=True
            )
        self.started[name] = process
        return process

    def log(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text(errors="replace")

    def stop(self, name: str, sig: int = signal.SIGTERM, timeout: float | None = None) -> None:
        process = self.started[name]
        if process.poll() is None:
            process.send_signal(sig)
            try:
                process.wait(backstop(30) if timeout is None else timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()

    def kill(self, name: str) -> None:
        """SIGKILL to the process and everything it started (as Slurm ends a cancelled step)."""
        process = self.started[name]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()

    def stop_all(self) -> None:
        for name, process in self.started.items():
            if process.poll() is None:
                os.kill(process.pid, signal.SIGCONT)  # a test may have frozen it
                self.stop(name)
            with contextlib.suppress(ProcessLookupError):  # what it started, should it have left anything
                os.killpg(process.pid, signal.SIGKILL)


def remove_private(folder: FleetFolder) -> None:
    """The private folders of this fleet's nodes that a SIGKILL left (a graceful stop removes its own)."""
    from air.fleet.node import private_prefix

    for path in glob.glob(private_prefix(folder) + "*"):
        shutil.rmtree(path, ignore_errors=True)


def node_command(folder: FleetFolder, name: str, *args: str, stub: bool = True) -> list[str]:
    command = [sys.executable, "-m", "air.cli.main", "fleet", "node", str(folder.root), "--name", name]
    command += ["--host", "127.0.0.1", "--bind", "127.0.0.1", *args]
    if stub:
        command += ["--no-docker", "--server-command", " ".join(STUB)]
    return command


def spread_command(folder: FleetFolder, address: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "air.cli.main", "fleet", "spread", str(folder.root), "--address", address, *args]


def wait_for(predicate, timeout: float, what: str, interval: float = 0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"waited {timeout:.0f} s for {what}")


def figures(folder: FleetFolder, source: str = "train") -> dict:
    return folder.figures(source)


class WireClient:
    """verifiers' EnvClient, reduced to the wire: one DEALER, replies matched by request id (a 0.4 delta is
    skipped). Returns each reply's body; ``three`` says which framing the server speaks."""

    def __init__(self, address: str, three: bool = True) -> None:
        self.ctx = zmq.asyncio.Context()
        self.socket = self.ctx.socket(zmq.DEALER)
        self.socket.setsockopt(zmq.LINGER, 0)
        self.socket.connect(address)
        self.three = three
        self.pending: dict[bytes, asyncio.Future] = {}
        self.receiver: asyncio.Task | None = None

    async def _receive(self) -> None:
        while True:
            frames = await self.socket.recv_multipart()
            if self.three:
                request_id, kind, data = frames
                if kind == b"delta":
                    continue
            else:
                request_id, data = frames
            future = self.pending.pop(request_id, None)
            if future is not None and not future.done():
                future.set_result(msgpack.unpackb(data, raw=False))

    async def request(self, method: bytes, body: dict, timeout: float | None = None) -> dict:
        if self.receiver is None:
            self.receiver = asyncio.create_task(self._receive())
        request_id = uuid.uuid4().hex.encode()
        future = asyncio.get_running_loop().create_future()
        self.pending[request_id] = future
        await self.socket.send_multipart([request_id, method, msgpack.packb(body, use_bin_type=True)])
        try:
            return await asyncio.wait_for(future, timeout)
        finally:
            self.pending.pop(request_id, None)

    async def run(self, seconds: float = 0.0, **task) -> dict:
        return await self.request(b"run", {"task_data": {"seconds": seconds, **task}}, None)

    async def healthy(self, timeout: float = 1.0) -> bool:
        try:
            return (await self.request(b"health", {}, timeout))["success"]
        except TimeoutError:
            return False

    async def close(self) -> None:
        if self.receiver is not None:
            self.receiver.cancel()
        self.socket.close(0)
        self.ctx.term()


@contextmanager
def fleet(
    tmp_path: Path,
    nodes: int = 2,
    *,
    capacity: int = 4,
    spread_args: tuple[str, ...] = (),
    wire: str = "three",
    stub_env: dict[str, str] | None = None,
) -> Iterator[tuple[FleetFolder, Processes, str]]:
    """A fleet folder, ``nodes`` stub env nodes (n1, n2, ...) and a spreader; yields the folder, the
    processes and the spreader's address once every node is up."""
    folder = make_folder(tmp_path / "fleet")
    processes = Processes(tmp_path / "logs")
    address = f"tcp://127.0.0.1:{free_port()}"
    try:
        for index in range(1, nodes + 1):
            name = f"n{index}"
            env = {"STUB_WIRE": wire, "STUB_NAME": name, **(stub_env or {})}
            processes.start(name, node_command(folder, name, "--capacity", str(capacity)), env)
        processes.start("spreader", spread_command(folder, address, *spread_args))
        wait_for(lambda: _all_up(folder, nodes), backstop(60), f"{nodes} env nodes up")
        yield folder, processes, address
    finally:
        processes.stop_all()
        remove_private(folder)


def _all_up(folder: FleetFolder, nodes: int) -> bool:
    found = figures(folder).get("nodes", {})
    return len(found) == nodes and all(node["state"] == "up" for node in found.values())
