"""One container and one persistent bash shell in it.

The container's main process is ``sleep <ttl>`` under docker-init: a dead-man switch, so a run
that dies leaves nothing running forever. Every container carries labels naming this project,
the run, and the owning process (host, pid and start time), which is how ``pool.reap_orphans``
knows what a dead process left behind.

The shell is a ``docker exec`` of bash whose stdin/stdout is the SDK's hijacked socket, driven
with asyncio's non-blocking socket calls: no thread per command, so one event loop drives many
shells. Blocking Docker calls (create, exec_run, archives, remove) go through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import socket
import tarfile
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import docker
import docker.errors
import psutil
from docker.models.containers import Container
from pydantic import BaseModel, ConfigDict, Field, field_validator

from air.shell_protocol import (
    SHELL_ARGV,
    SHELL_ENV,
    Capture,
    FrameDecoder,
    new_nonce,
    recovery_line,
    shell_setup,
    wrap_command,
)

LABEL = "air.managed"
LABEL_RUN = "air.run"
LABEL_HOST = "air.owner.host"
LABEL_PID = "air.owner.pid"
LABEL_STARTED = "air.owner.started"

WORKSPACE = "/home/agent/workspace"
# MLGym's image keeps its Python in a conda env; when present it goes first on the agent's PATH.
MLGYM_CONDA_BIN = "/home/agent/miniconda3/envs/mlgym_generic/bin"


class SandboxError(RuntimeError):
    """Base of the sandbox's errors."""


class SandboxDied(SandboxError):
    """The container or its shell is gone; the sandbox cannot be used any more."""


class SandboxStartError(SandboxError):
    """A container could not be created or its shell did not come up."""


def parse_env_gpu(env_gpu: str | None) -> list[str]:
    """``"7"`` or ``"6,7"`` -> device ids; ``None``/``""`` -> no GPU."""
    if env_gpu is None or str(env_gpu).strip() == "":
        return []
    ids = [part.strip() for part in str(env_gpu).split(",")]
    if not all(i.isdigit() for i in ids) or len(set(ids)) != len(ids):
        raise ValueError(f"env_gpu must be GPU indices like '7' or '6,7', got {env_gpu!r}")
    return ids


class SandboxConfig(BaseModel):
    """How sandbox containers are made."""

    model_config = ConfigDict(extra="forbid")

    image: str = Field(default="", description="Image to run; empty means the recipe's current tag.")
    user: str = Field(default="agent", description="User the agent's shell runs as.")
    workdir: str = Field(default=WORKSPACE, description="The agent's starting directory.")
    cpus: float = Field(default=2.0, gt=0, description="CPU limit (cores).")
    memory: str = Field(default="4g", description="Memory limit (docker syntax), swap disabled.")
    pids_limit: int = Field(default=1024, gt=16, description="Most processes in the container.")
    network: bool = Field(default=False, description="Give the container a network (off by default).")
    env_gpu: str | None = Field(default=None, description="GPUs for the container: '7' or '6,7'.")
    ttl_s: int = Field(default=12 * 3600, gt=0, description="Dead-man switch: container lifetime.")
    max_output_bytes: int = Field(default=256 * 1024, ge=1024, description="Output kept per command.")
    command_timeout_s: float = Field(default=60.0, gt=0, description="Default per-command timeout.")
    interrupt_grace_s: float = Field(default=5.0, gt=0, description="Wait after a timeout's kill.")
    run_id: str = Field(default="default", description="Label naming the run that owns containers.")
    environment: dict[str, str] = Field(default_factory=dict, description="Extra environment variables.")

    @field_validator("env_gpu")
    @classmethod
    def _check_gpu(cls, value: str | None) -> str | None:
        parse_env_gpu(value)
        return value

    def resolved_image(self) -> str:
        """The image setting, else $AIR_IMAGE, else the tag the current recipe hashes to."""
        if self.image:
            return self.image
        if os.environ.get("AIR_IMAGE"):
            return os.environ["AIR_IMAGE"]
        from air.image import default_image_tag

        return default_image_tag()


@dataclass(frozen=True)
class CommandResult:
    """What one shell command did."""

    output: str
    exit_code: int | None
    duration_s: float
    timed_out: bool = False
    truncated: bool = False
    output_bytes: int = 0
    shell_restarted: bool = False


def owner_labels(run_id: str) -> dict[str, str]:
    proc = psutil.Process(os.getpid())
    return {
        LABEL: "1",
        LABEL_RUN: run_id,
        LABEL_HOST: socket.gethostname(),
        LABEL_PID: str(proc.pid),
        LABEL_STARTED: f"{proc.create_time():.3f}",
    }


_client: docker.DockerClient | None = None


def docker_client() -> docker.DockerClient:
    """One shared client per process (it is thread-safe and keeps a connection pool)."""
    global _client
    if _client is None:
        try:
            _client = docker.from_env(timeout=120, max_pool_size=64)
            _client.ping()
        except docker.errors.DockerException as exc:
            _client = None
            raise SandboxStartError(
                f"No Docker engine answers ({exc}). Start one (e.g. `dockerd &` or "
                "`systemctl start docker`) or set DOCKER_HOST."
            ) from exc
    return _client


def container_kwargs(config: SandboxConfig, labels: dict[str, str]) -> dict[str, Any]:
    """Arguments for ``containers.run``; separate so the limits are unit-testable."""
    kwargs: dict[str, Any] = dict(
        image=config.resolved_image(),
        command=["sleep", str(config.ttl_s)],
        detach=True,
        init=True,
        user=config.user,
        working_dir=config.workdir,
        labels=labels,
        nano_cpus=int(config.cpus * 1e9),
        mem_limit=config.memory,
        memswap_limit=config.memory,
        pids_limit=config.pids_limit,
        network_mode="bridge" if config.network else "none",
        hostname="sandbox",
        environment={"HOME": "/home/agent", "PYTHONUNBUFFERED": "1", **config.environment},
    )
    gpus = parse_env_gpu(config.env_gpu)
    if gpus:
        kwargs["device_requests"] = [docker.types.DeviceRequest(device_ids=gpus, capabilities=[["gpu"]])]
    return kwargs


# Run as root on a timeout: stop, then kill, the shell's descendants started by the timed-out
# command, then SIGINT the shell itself (started at or after the cutoff, in clock ticks since boot), leaving earlier
# background jobs alone. Pure bash over /proc so it works in any image.
_KILL_TREE = r"""
root=$1; since_cs=$2
read -r up _ </proc/uptime; up=${up/./}; cutoff=$(( up - since_cs ))
victims() {
  declare -A parent start
  for f in /proc/[0-9]*/stat; do
    line=$(<"$f") 2>/dev/null || continue
    pid=${f#/proc/}; pid=${pid%/stat}; rest=${line##*) }
    set -- $rest; parent[$pid]=$2; start[$pid]=${20}
  done
  local frontier=("$root") found=() p c
  while ((${#frontier[@]})); do
    local next=()
    for p in "${frontier[@]}"; do
      for c in "${!parent[@]}"; do
        if [[ ${parent[$c]} == "$p" ]]; then next+=("$c"); found+=("$c"); fi
      done
    done
    frontier=("${next[@]}")
  done
  for c in "${found[@]}"; do (( ${start[$c]} >= cutoff )) && echo "$c"; done
}
for round in 1 2; do pids=$(victims); [ -n "$pids" ] && kill -STOP $pids 2>/dev/null; done
pids=$(victims)
# bash abandons the rest of the line (so `train; validate` does not go on to validate) only
# when its foreground child dies *of SIGINT*; so SIGINT the shell and the stopped victims, let
# them run to die of it, then SIGKILL whatever ignored it. A builtin loop breaks on the SIGINT.
kill -INT "$root"
if [ -n "$pids" ]; then
  kill -INT $pids 2>/dev/null; kill -CONT $pids 2>/dev/null
  sleep 0.2
  kill -KILL $pids 2>/dev/null
fi
"""


class Shell:
    """One persistent bash in a container, spoken to through an exec socket."""

    def __init__(self, container: Container, config: SandboxConfig) -> None:
        self._container = container
        self._config = config
        self._sock: socket.socket | None = None
        self._decoder = FrameDecoder()
        self._lock = asyncio.Lock()
        self.pid: int | None = None
        self.cwd: str = config.workdir

    async def start(self, cwd: str | None = None) -> None:
        api = self._container.client.api

        def _open() -> socket.socket:
            exec_id = api.exec_create(
                self._container.id,
                SHELL_ARGV,
                stdin=True,
                stdout=True,
                stderr=True,
                tty=False,
                user=self._config.user,
                workdir=self._config.workdir,
                environment=SHELL_ENV,
            )["Id"]
            raw = api.exec_start(exec_id, socket=True)
            sock = raw._sock  # the hijacked connection under the SDK's SocketIO wrapper
            sock.setblocking(False)
            return sock

        try:
            self._sock = await asyncio.to_thread(_open)
        except docker.errors.DockerException as exc:
            raise SandboxDied(f"cannot start a shell in container {self._container.short_id}: {exc}") from exc
        self._decoder = FrameDecoder()
        loop = asyncio.get_running_loop()
        # An MLGym image's conda env goes first on PATH; start where the shell was (after a restart).
        setup = shell_setup(path_prepend=MLGYM_CONDA_BIN, cwd=cwd or self._config.workdir)
        await loop.sock_sendall(self._sock, setup)
        result = await self._run_locked("echo $$", timeout=30)
        last_line = result.output.strip().splitlines()[-1:] or [""]
        if result.exit_code != 0 or not last_line[0].isdigit():
            raise SandboxDied(f"shell did not start properly: {result.output[-300:]!r}")
        self.pid = int(last_line[0])

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None

    async def run(self, command: str, timeout: float | None = None) -> CommandResult:
        async with self._lock:
            return await self._run_locked(command, timeout)

    async def _run_locked(self, command: str, timeout: float | None) -> CommandResult:
        if self._sock is None:
            raise SandboxDied("shell is closed")
        timeout = self._config.command_timeout_s if timeout is None else timeout
        nonce = new_nonce()
        capture = Capture(self._config.max_output_bytes, (nonce,))
        start = time.perf_counter()
        await self._send(wrap_command(command, nonce))
        timed_out = restarted = False
        try:
            await asyncio.wait_for(self._read_until_done(capture), timeout)
        except TimeoutError:
            timed_out = True
            restarted = not await self._interrupt(capture, time.perf_counter() - start)
        output = capture.text()
        if timed_out:
            note = f"\n[command timed out after {timeout:g} s and was interrupted"
            note += "; the shell was restarted, so exported variables were reset]" if restarted else "]"
            output += note
        if capture.cwd:
            self.cwd = capture.cwd
        return CommandResult(
            output=output,
            exit_code=None if restarted else capture.exit_code,
            duration_s=time.perf_counter() - start,
            timed_out=timed_out,
            truncated=capture.truncated,
            output_bytes=capture.total,
            shell_restarted=restarted,
        )

    async def _send(self, data: bytes) -> None:
        try:
            await asyncio.get_running_loop().sock_sendall(self._sock, data)
        except OSError as exc:
            raise await self._died(f"cannot write to shell: {exc}") from exc

    async def _read_until_done(self, capture: Capture, pending: bytes = b"") -> None:
        loop = asyncio.get_running_loop()
        assert self._sock is not None
        if pending and capture.feed(pending):
            return
        while True:
            try:
                data = await loop.sock_recv(self._sock, 1 << 16)
            except OSError as exc:
                raise await self._died(f"shell connection broke: {exc}") from exc
            if not data:
                raise await self._died("shell exited")
            if capture.feed(self._decoder.feed(data)):
                return

    async def _interrupt(self, capture: Capture, elapsed_s: float) -> bool:
        """Stop a timed-out command; True if the shell is usable again, False if it was replaced."""
        since_cs = int((elapsed_s + 1.0) * 100)  # /proc clock ticks are 1/100 s

        def _kill() -> None:
            argv = ["bash", "-c", _KILL_TREE, "killtree", str(self.pid), str(since_cs)]
            self._container.exec_run(argv, user="root")

        try:
            await asyncio.to_thread(_kill)
        except docker.errors.DockerException as exc:
            raise await self._died(f"cannot interrupt command: {exc}") from exc
        # The interrupted line's own marker may or may not come; the recovery marker always does.
        recovery = new_nonce()
        await self._send(recovery_line(recovery))
        capture.add_nonce(recovery)
        grace = self._config.interrupt_grace_s
        try:
            await asyncio.wait_for(self._read_until_done(capture), grace)
            if capture.matched != recovery:
                drain = Capture(self._config.max_output_bytes, (recovery,))
                await asyncio.wait_for(self._read_until_done(drain, capture.rest), grace)
            return True
        except TimeoutError:
            await self._restart()
            return False

    async def _died(self, why: str) -> SandboxDied:
        self.close()
        try:
            await asyncio.to_thread(self._container.reload)
            state = self._container.attrs.get("State", {})
            status = self._container.status
            if status != "running":
                why += f"; container {status} (exit code {state.get('ExitCode')}, OOMKilled={state.get('OOMKilled')})"
        except docker.errors.NotFound:
            why += "; container no longer exists"
        except docker.errors.DockerException as exc:
            why += f"; container state unknown: {exc}"
        return SandboxDied(f"{why} [container {self._container.short_id}]")

    async def _restart(self) -> None:
        old_pid, cwd = self.pid, self.cwd
        self.close()
        if old_pid:
            await asyncio.to_thread(self._container.exec_run, ["kill", "-KILL", str(old_pid)], user="root")
        await self.start(cwd=cwd)


class Sandbox:
    """A container with one persistent agent shell, plus root-side helpers for the runtime."""

    def __init__(self, container: Container, config: SandboxConfig) -> None:
        self.container = container
        self.config = config
        self.shell = Shell(container, config)
        self.created_at = time.time()

    @property
    def id(self) -> str:
        return self.container.id

    @classmethod
    async def create(cls, config: SandboxConfig, client: docker.DockerClient | None = None) -> Sandbox:
        client = client or await asyncio.to_thread(docker_client)
        labels = owner_labels(config.run_id)
        kwargs = container_kwargs(config, labels)
        try:
            container = await asyncio.to_thread(client.containers.run, **kwargs)
        except docker.errors.ImageNotFound as exc:
            raise SandboxStartError(
                f"Sandbox image {kwargs['image']!r} not found: build it with `air build-image`."
            ) from exc
        except docker.errors.DockerException as exc:
            raise SandboxStartError(f"Cannot start a sandbox container: {exc}") from exc
        _track(container.id)
        sandbox = cls(container, config)
        try:
            await sandbox.shell.start()
        except BaseException:
            await asyncio.to_thread(destroy_container, container)
            raise
        return sandbox

    async def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run ``command`` in the agent's shell."""
        return await self.shell.run(command, timeout)

    async def exec_root(self, argv: list[str], timeout: float = 120, workdir: str | None = None) -> tuple[int, str]:
        """Run a program as root outside the agent's shell (a fresh process, clean environment)."""
        cmd = ["timeout", "-s", "KILL", str(max(1, int(timeout))), *argv]

        def _exec() -> tuple[int, str]:
            res = self.container.exec_run(cmd, user="root", workdir=workdir or "/", demux=False)
            return res.exit_code, (res.output or b"").decode("utf-8", "replace")

        try:
            return await asyncio.to_thread(_exec)
        except docker.errors.DockerException as exc:
            raise SandboxDied(f"exec in container {self.container.short_id} failed: {exc}") from exc

    async def alive(self) -> bool:
        try:
            await asyncio.to_thread(self.container.reload)
        except docker.errors.DockerException:
            return False
        return self.container.status == "running" and self.shell._sock is not None

    async def copy_in(self, source: Path | str, dest_dir: str, owner: str | None = None) -> None:
        """Copy a host file or folder into ``dest_dir`` (created if missing), keeping its basename."""
        source = Path(source)
        if not source.exists():
            raise FileNotFoundError(f"cannot copy {source} into the sandbox: it does not exist")
        data = await asyncio.to_thread(tar_of, {source.name: source})
        await self.put_archive(dest_dir, data, owner=owner, top=[source.name])

    async def write_file(self, path: str, content: bytes | str, owner: str | None = None, mode: int = 0o644) -> None:
        target = PurePosixPath(path)
        raw = content.encode() if isinstance(content, str) else content
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(target.name)
            info.size, info.mode, info.mtime = len(raw), mode, int(time.time())
            tar.addfile(info, io.BytesIO(raw))
        await self.put_archive(str(target.parent), buf.getvalue(), owner=owner, top=[target.name])

    async def put_archive(
        self, dest_dir: str, data: bytes, owner: str | None = None, top: tuple[str, ...] | list[str] = ()
    ) -> None:
        """Unpack a tar archive into ``dest_dir``; ``owner`` gets the top-level entries ``top``."""
        code, out = await self.exec_root(["mkdir", "-p", dest_dir])
        if code != 0:
            raise SandboxError(f"cannot create {dest_dir} in the sandbox: {out.strip()}")
        try:
            ok = await asyncio.to_thread(self.container.put_archive, dest_dir, data)
        except docker.errors.DockerException as exc:
            raise SandboxDied(f"copy into container {self.container.short_id} failed: {exc}") from exc
        if not ok:
            raise SandboxError(f"copy into {dest_dir} was refused by the engine")
        paths = [str(PurePosixPath(dest_dir) / name) for name in top]
        if owner and paths:
            await self.exec_root(["chown", "-R", f"{owner}:{owner}", *paths])

    async def copy_out(self, path: str, dest_dir: Path | str) -> Path:
        """Copy a file or folder out of the container into host ``dest_dir``; returns its host path."""
        dest = Path(dest_dir)
        dest.mkdir(parents=True, exist_ok=True)

        def _get() -> None:
            stream, _ = self.container.get_archive(path)
            with _spooled(stream) as fileobj, tarfile.open(fileobj=fileobj) as tar:
                tar.extractall(dest, filter="data")

        try:
            await asyncio.to_thread(_get)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(f"{path} does not exist in the sandbox") from exc
        except docker.errors.DockerException as exc:
            raise SandboxDied(f"copy out of container {self.container.short_id} failed: {exc}") from exc
        return dest / PurePosixPath(path).name

    async def read_file(self, path: str) -> bytes:
        def _get() -> bytes:
            stream, _ = self.container.get_archive(path)
            with _spooled(stream) as fileobj, tarfile.open(fileobj=fileobj) as tar:
                member = tar.next()
                if member is None or not member.isfile():
                    raise IsADirectoryError(f"{path} is not a regular file")
                extracted = tar.extractfile(member)
                assert extracted is not None
                return extracted.read()

        try:
            return await asyncio.to_thread(_get)
        except docker.errors.NotFound as exc:
            raise FileNotFoundError(f"{path} does not exist in the sandbox") from exc

    async def destroy(self) -> None:
        self.shell.close()
        await asyncio.to_thread(destroy_container, self.container)


@contextlib.contextmanager
def _spooled(chunks: Any) -> Iterator[Any]:
    """Spool an archive stream to a temporary file so large archives never sit in memory."""
    with tempfile.SpooledTemporaryFile(max_size=8 << 20) as fileobj:
        for chunk in chunks:
            fileobj.write(chunk)
        fileobj.seek(0)
        yield fileobj


def tar_of(entries: dict[str, Path]) -> bytes:
    """A tar archive (in memory) of host paths, each stored under the given archive name."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, path in entries.items():
            tar.add(str(path), arcname=name)
    return buf.getvalue()


# Containers this process created and has not yet destroyed: removed at exit (see pool).
_live: set[str] = set()


def _track(container_id: str) -> None:
    _live.add(container_id)


def destroy_container(container: Container | str, client: docker.DockerClient | None = None) -> None:
    """Kill, then remove, a container; quiet if it is already gone."""
    cid = container if isinstance(container, str) else container.id
    try:
        if isinstance(container, str):
            container = (client or docker_client()).containers.get(container)
        try:
            container.kill()
        except docker.errors.APIError:
            pass  # not running any more
        container.remove(force=True, v=True)
    except docker.errors.NotFound:
        pass
    finally:
        _live.discard(cid)


def live_container_ids() -> set[str]:
    return set(_live)
