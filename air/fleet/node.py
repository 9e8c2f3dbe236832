"""``air fleet node DIR``: one env node's life, as a Slurm job step runs it (or by hand on any host).

In order: the processes a previous start of this node on this host left running are ended
(:mod:`air.fleet.previous_start`); its Docker engine answers (else it stops at once, saying so); the
containers the previous start left are removed; the env's image is there (built if it is ours and missing);
the env server starts on a private socket (:mod:`air.env.v1_serve`, the node's GPUs given to its tasks); the
gate (:mod:`air.fleet.gate`) opens on the node's address; once the env server answers, the node's record goes
into the fleet folder for the spreader to find. On SIGTERM, SIGINT, or its env server's death: the record is
withdrawn, the env server stopped (its episodes answer as cancelled through the gate), the gate closed and
this node's containers removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import os
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import docker

from air.fleet.errors import FleetError
from air.fleet.folder import FleetFolder, KeyPair, NodeRecord, write_private
from air.fleet.gate import Gate
from air.fleet.previous_start import end_previous_start, record_start
from air.fleet.probe import answers
from air.fleet.settings import GateSettings
from air.sandbox.config import LABEL_RUN
from air.sandbox.engine import DOCKER_ERRORS, engine_address, engine_answers

log = logging.getLogger(__name__)
SERVER_MODULE = "air.env.v1_serve"


@dataclass
class NodeOptions:
    folder: FleetFolder
    name: str = field(default_factory=lambda: os.environ.get("SLURMD_NODENAME") or socket.gethostname())
    host: str = ""  # the address others reach it at; default: this host's name
    bind: str = "*"
    port: int = 0
    capacity: int | None = None  # default: the env's warm pool size
    docker: bool = True  # False: a server that needs no engine (tests' stub servers)
    server_command: list[str] | None = None  # default: python -m air.env.v1_serve
    start_timeout_s: float = 300.0
    gate: GateSettings = field(default_factory=GateSettings)


# Slurm's own first: they name the host's device ids, which Docker's device requests take; CUDA_VISIBLE_DEVICES
# is renumbered from 0 where Slurm constrains devices, so it is read only when Slurm says nothing (a node by hand).
GPU_VARIABLES = ("SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES")


def node_gpus() -> list[str]:
    """The GPUs Slurm (or the user) gave this node, as host device ids; none when nothing says."""
    for variable in GPU_VARIABLES:
        value = os.environ.get(variable, "").strip()
        if value and value != "NoDevFiles":
            return [part.strip() for part in value.split(",") if part.strip()]
    return []


def node_env(options: NodeOptions) -> tuple[dict, str, int, list[str]]:
    """The env this node serves (its run id its own, its GPUs given to tasks), that run id, its capacity."""
    env = options.folder.env_config()
    taskset = dict(env["taskset"])
    run_id = f"{taskset.get('run_id') or 'air'}-{options.name}"
    taskset["run_id"] = run_id
    if not taskset.get("evaluation_secret_file"):  # every node of the run: one secret, one group's dice
        if not options.folder.evaluation_secret.exists():
            raise FleetError(
                f"{options.folder.evaluation_secret} is missing: run `air fleet init DIR --config rl.toml` on this "
                "folder again (it keeps the keys and adds the evaluation secret)"
            )
        taskset["evaluation_secret_file"] = str(options.folder.evaluation_secret)
    gpus = node_gpus()
    if gpus:  # what the node was given wins over a config written for one machine's layout ("7")
        if taskset.get("env_gpu") and str(taskset["env_gpu"]) != ",".join(gpus):
            log.info("env_gpu %s of the env replaced by this node's GPUs %s", taskset["env_gpu"], ",".join(gpus))
        taskset["env_gpu"] = ",".join(gpus)
    capacity = options.capacity or int(taskset.get("pool_size") or 4) or 1
    return {**env, "taskset": taskset}, run_id, capacity, gpus


def our_containers(run_id: str, *, running_only: bool = False) -> list:
    client = docker.from_env(timeout=10)
    try:
        filters = {"label": f"{LABEL_RUN}={run_id}"}
        return client.containers.list(all=not running_only, filters=filters, ignore_removed=True)
    finally:
        client.close()


def remove_containers(run_id: str) -> int:
    removed = 0
    for container in our_containers(run_id):
        with contextlib.suppress(*DOCKER_ERRORS):
            container.remove(force=True)
            removed += 1
    return removed


def prepare_engine(env: dict, run_id: str) -> None:
    if not engine_answers(timeout=5):
        raise FleetError(
            f"this node's Docker engine does not answer at {engine_address()}: start it (dockerd), or set DOCKER_HOST"
        )
    removed = remove_containers(run_id)
    if removed:
        log.info("removed %d containers a previous start of this node left (label %s=%s)", removed, LABEL_RUN, run_id)
    image = env["taskset"].get("image")
    if image:
        client = docker.from_env(timeout=30)
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound as exc:
            raise FleetError(
                f"image {image} (the env's `image`) is not on this node's engine: load or build it here"
            ) from exc
        finally:
            client.close()
    else:
        from air.sandbox.image.build import build_image

        build_image(progress=False)  # ours: built here if missing, from the recipe


NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,62}")


def check_unique(folder: FleetFolder, name: str, keys: tuple[KeyPair, bytes]) -> None:
    """A node of this name that still answers is another live node: starting would remove its containers."""
    if not NAME.fullmatch(name):
        raise FleetError(f"env node name {name!r}: letters, digits, '.', '_' and '-' only (--name)")
    record = folder.records().get(name)
    if record is not None and answers(record.address, keys):
        raise FleetError(
            f"an env node named {name!r} already answers at {record.address} (pid {record.pid} on "
            f"{record.host}): give this one another --name"
        )


def private_prefix(folder: FleetFolder) -> str:
    """What the private folders of this fleet's nodes on this host are named from (``<prefix><node name>``)."""
    digest = hashlib.sha256(str(folder.root).encode()).hexdigest()[:10]
    return str(Path(tempfile.gettempdir()) / f"air-node-{os.getuid()}-{digest}-")


def private_path(folder: FleetFolder, name: str) -> Path:
    return Path(private_prefix(folder) + name)


def private_folder(folder: FleetFolder, name: str) -> Path:
    """This node's own folder for its env server's socket and env, 0700, at a name its next start finds again:
    a start after a SIGKILL removes what the killed one left."""
    path = private_path(folder, name)
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        pass
    else:
        if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid():
            raise FleetError(f"{path} exists and is not this user's folder: remove it")
        shutil.rmtree(path)
    path.mkdir(mode=0o700)
    return path


def serve_node(options: NodeOptions) -> int:
    """Run the node until it is told to stop; 0 on a stop asked for, 1 when its env server died."""
    folder = options.folder
    node_keys, client_keys = folder.key_pair("node"), folder.key_pair("client")
    client_public = client_keys.public
    check_unique(folder, options.name, (client_keys, node_keys.public))
    env, run_id, capacity, gpus = node_env(options)
    # Its processes first: an env server orphaned by a SIGKILL would go on making containers under our label.
    end_previous_start(private_path(folder, options.name))
    if options.docker:
        prepare_engine(env, run_id)
    private = private_folder(folder, options.name)  # the env server's socket is this user's only
    config = private / "env.json"
    write_private(config, json.dumps(env))
    inner_address = f"ipc://{private}/env.sock"
    logs = folder.logs(options.name)
    logs.mkdir(parents=True, exist_ok=True)
    command = options.server_command or [sys.executable, "-m", SERVER_MODULE]
    # The env server reads EOF on this pipe once this process is gone, even by SIGKILL (air.env.v1_serve).
    node_gone, node_alive = os.pipe()
    with open(logs / "env-server.log", "ab") as server_log:
        server = subprocess.Popen(
            [*command, str(config), inner_address, str(capacity)],
            stdout=server_log,
            stderr=subprocess.STDOUT,
            pass_fds=(node_gone,),
            # AIR_FLEET_NODE: air.env.v1_front puts it in each trace's info
            env={**os.environ, "AIR_FLEET_NODE": options.name, "AIR_FLEET_NODE_PIPE": str(node_gone)},
        )
    os.close(node_gone)  # the write end, node_alive, stays open here until this process ends
    try:
        record_start(private, {"env server": server.pid, "node process": os.getpid()})  # for our next start
        return asyncio.run(_serve(options, node_keys, client_public, inner_address, server, capacity, gpus, run_id))
    finally:
        _stop(server)
        os.close(node_alive)
        if options.docker:
            with contextlib.suppress(*DOCKER_ERRORS):
                remove_containers(run_id)
        shutil.rmtree(private, ignore_errors=True)


async def _serve(options, node_keys, client_public, inner_address, server, capacity, gpus, run_id) -> int:
    engine_check = (lambda: engine_answers(timeout=options.gate.check_timeout_s)) if options.docker else None
    containers = (lambda: len(our_containers(run_id, running_only=True))) if options.docker else None
    gate = Gate(node_keys, client_public, inner_address, options.gate, engine_check, containers)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    endpoint = gate.bind(f"tcp://{options.bind}:{options.port}")
    port = int(endpoint.rsplit(":", 1)[1])
    record = NodeRecord(
        name=options.name,
        address=f"tcp://{options.host or socket.gethostname()}:{port}",
        incarnation=uuid.uuid4().hex,
        host=socket.gethostname(),
        pid=os.getpid(),
        capacity=capacity,
        gpus=gpus,
    )
    gating = asyncio.create_task(gate.run())
    code = 0
    try:
        deadline = time.monotonic() + options.start_timeout_s
        while not gate.inner_answered:
            if server.poll() is not None or time.monotonic() > deadline:
                server_log = options.folder.logs(options.name) / "env-server.log"
                raise FleetError(f"the env server of node {options.name} did not start: read {server_log}")
            await asyncio.sleep(0.2)
        options.folder.publish(record)
        log.info(
            "env node %s serves at %s (%d episodes at once, GPUs %s)",
            record.name,
            record.address,
            capacity,
            gpus or "none",
        )
        while not stop.is_set():
            if server.poll() is not None:
                log.error("env node %s: its env server exited (%s): stopping", options.name, server.returncode)
                code = 1
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), 1.0)
    finally:
        options.folder.withdraw(record)
        await asyncio.to_thread(_stop, server)  # its episodes answer "cancelled" through the still-open gate
        gating.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await gating
        gate.close()
    return code


def _stop(server: subprocess.Popen, grace_s: float = 30.0) -> None:
    if server.poll() is not None:
        return
    server.terminate()
    try:
        server.wait(grace_s)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()
