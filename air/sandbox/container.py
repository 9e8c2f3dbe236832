"""One container: its life, limits, labels and files (the shell inside it is ``air.sandbox.shell``).

The container's main process is root's keep-alive (``keep_alive``) under docker-init: a dead-man switch,
so a run that dies leaves nothing running forever, and one the agent cannot kill. Its agent has a uid of
its own (``agent_uid``). Every container carries labels naming this project, the run, and the owning
process (host, pid and start time), which is how ``pool.reap_orphans`` knows what a dead process left.

The shell inside is ``air.sandbox.shell``; the settings are ``config``; this module owns the container's
life: create, limits, labels, root-side exec, file copies, destroy. Blocking Docker calls go through
``asyncio.to_thread``, so one event loop drives many sandboxes.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import tarfile
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

import docker
import docker.errors
from docker.models.containers import Container

from air.sandbox import disk_image
from air.sandbox.agent_uid import agent_uid
from air.sandbox.config import SandboxConfig, owner_labels, parse_env_gpu
from air.sandbox.disk_watch import ContainerStopped, DiskWatch
from air.sandbox.engine import DOCKER_ERRORS, absent_message, looks_like_engine_failure, unreachable_message
from air.sandbox.errors import SandboxDied, SandboxError, SandboxStartError, ShellEnded, ShellUnstartable, image_missing
from air.sandbox.fault import container_fault
from air.sandbox.keep_alive import keep_alive_argv
from air.sandbox.shell import CommandResult, Shell
from air.sandbox.storage import driver_or_none, quota_refused_hint, storage_kwargs, watches_disk

_client: docker.DockerClient | None = None


def docker_client() -> docker.DockerClient:
    """One shared client per process (it is thread-safe and keeps a connection pool)."""
    global _client
    if _client is None:
        try:
            _client = docker.from_env(timeout=120, max_pool_size=64)
            _client.ping()
        except DOCKER_ERRORS as exc:
            _client = None
            raise SandboxStartError(f"{absent_message()} ({exc})") from exc
    return _client


def reset_docker_client() -> None:
    """Drop the shared client: the next call connects afresh (after the engine came back from a restart)."""
    global _client
    old, _client = _client, None
    if old is not None:
        try:
            old.close()
        except Exception:  # closing a client of a dead engine: nothing to save
            pass


def require_image(config: SandboxConfig, client: docker.DockerClient | None = None) -> str:
    """The image ``config`` runs, checked to exist (one cheap engine query); raises SandboxImageMissing."""
    image = config.resolved_image()
    client = client or docker_client()
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound as exc:
        raise image_missing(image) from exc
    except DOCKER_ERRORS as exc:
        raise SandboxStartError(f"Cannot ask the Docker engine for image {image!r}: {exc}") from exc
    return image


def _image_present(client: docker.DockerClient, image: str) -> bool:
    try:
        client.images.get(image)
    except docker.errors.ImageNotFound:
        return False
    except DOCKER_ERRORS:
        return True  # cannot tell: report the original error
    return True


def container_kwargs(config: SandboxConfig, labels: dict[str, str], driver: str | None = None) -> dict[str, Any]:
    """Arguments for ``containers.run`` on an engine whose storage driver is ``driver`` (``storage``);
    separate so the limits are unit-testable."""
    kwargs: dict[str, Any] = dict(
        image=config.resolved_image(),
        command=keep_alive_argv(config.ttl_s, config.user),  # kills the agent's processes on SIGUSR1
        detach=True,
        init=True,
        # docker-init and the keep-alive are root's: the agent (its shell is exec'd as config.user) can
        # neither signal nor trace them, so it cannot end its container or replace pid 1 with its own.
        user="root",
        # No setuid program (su, sudo, ping) raises anyone's rights; root's own execs lose nothing by it.
        security_opt=["no-new-privileges"],
        working_dir="/",  # an exec that names no folder never starts in one the agent owns (and may remove)
        labels=labels,
        nano_cpus=int(config.cpus * 1e9),
        mem_limit=config.memory,
        memswap_limit=config.memory,
        pids_limit=config.pids_limit,
        network_mode="bridge" if config.network else "none",
        hostname="sandbox",
        environment={"HOME": "/home/agent", "PYTHONUNBUFFERED": "1", **config.environment},
        sysctls=config.ipc_sysctls(),
        **storage_kwargs(config, driver),
    )
    gpus = parse_env_gpu(config.env_gpu)
    if gpus:
        kwargs["device_requests"] = [docker.types.DeviceRequest(device_ids=gpus, capabilities=[["gpu"]])]
    return kwargs


def _ended_how(container: Container) -> str:
    """The container's state as the engine reports it, for an error message."""
    try:
        container.reload()
    except DOCKER_ERRORS as exc:
        return f"its state could not be read: {exc}"
    state = container.attrs.get("State", {})
    return (
        f"its state: {state.get('Status')}, exit code {state.get('ExitCode')}, OOM-killed {state.get('OOMKilled')}, "
        f"started {state.get('StartedAt')}, finished {state.get('FinishedAt')}, error {state.get('Error')!r}"
    )


class Sandbox:
    """A container with one persistent agent shell, plus root-side helpers for the runtime."""

    def __init__(self, container: Container, config: SandboxConfig) -> None:
        self.container = container
        self.config = config
        self.shell = Shell(container, config)
        self.disk = DiskWatch(container, config, self.shell)  # enabled by ``create`` where the engine has no quota
        self.generation = 0  # the pool's engine generation when this container started (see pool)

    @property
    def id(self) -> str:
        return self.container.id

    @classmethod
    async def create(cls, config: SandboxConfig, client: docker.DockerClient | None = None) -> Sandbox:
        client = client or await asyncio.to_thread(docker_client)
        labels = owner_labels(config.run_id)
        driver = await asyncio.to_thread(driver_or_none, client) if config.disk else None
        kwargs = container_kwargs(config, labels, driver)
        # Where the engine cannot size it: its writable layer on a file system of its own (``disk_image``).
        own_fs = disk_image.LayerFs(config, await asyncio.to_thread(disk_image.wanted, config, driver, client))
        try:
            container = await asyncio.to_thread(_create_and_start, client, kwargs, own_fs.prepare)
        except DOCKER_ERRORS as exc:
            if looks_like_engine_failure(exc):
                raise SandboxStartError(f"Cannot start a sandbox container: {unreachable_message()} ({exc})") from exc
            # Without a registry the SDK's pull-on-missing turns ImageNotFound into a pull error: ask.
            if isinstance(exc, docker.errors.ImageNotFound) or not await asyncio.to_thread(
                _image_present, client, kwargs["image"]
            ):
                raise image_missing(kwargs["image"]) from exc
            raise SandboxStartError(
                f"Cannot start a sandbox container: {exc}{quota_refused_hint(exc, config)}"
            ) from exc
        _track(container.id)
        sandbox = cls(container, config)
        sandbox.shell.agent_uid = agent_uid(container, config.user)
        sandbox.disk.enabled = watches_disk(config, driver)
        try:
            if await asyncio.to_thread(own_fs.confirm, container):
                sandbox.disk.enabled = False  # the kernel keeps the limit: nothing to watch
            await sandbox.shell.start()
        except SandboxDied as exc:
            # A container dead before its shell started: say how it ended (exit code, OOM, the engine's error).
            state = await asyncio.to_thread(_ended_how, container)
            with contextlib.suppress(*DOCKER_ERRORS, RuntimeError):
                await asyncio.to_thread(destroy_container, container)
            raise SandboxDied(f"{exc}; {state}") from exc
        except BaseException:
            # An engine gone mid-start: its removal is retried. A loop shutting down (Ctrl-C) has no thread
            # pool left (RuntimeError): the container is tracked, and the exit clean-up removes it.
            with contextlib.suppress(*DOCKER_ERRORS, RuntimeError):
                await asyncio.to_thread(destroy_container, container)
            raise
        return sandbox

    async def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run ``command`` in the agent's shell. While the container is over its disk limit (``disk_watch``) the
        command still runs, so that it can delete files; if the container is still over after it, it failed."""
        self.disk.start()
        result = await self.shell.run(command, timeout)
        if self.disk.over and not result.halted:  # a halted command says so already
            try:
                note = await self.disk.check()  # asked again: the command may have deleted enough
            except (ContainerStopped, *DOCKER_ERRORS):
                note = self.disk.message()
            if note:
                code = 1 if result.exit_code == 0 else result.exit_code
                result = replace(result, output=f"{result.output}\n[{note}]", exit_code=code)
        return result

    async def over_disk_limit(self) -> str | None:
        """None while the container's writes fit its disk limit, else the message for the agent: an evaluation
        fails with it. Asked of the engine now where it cannot size containers (the quota keeps it elsewhere:
        always None there; none asked while the last check leaves no room to have passed it since). Raises
        ``SandboxDied`` when the engine cannot say."""
        if not self.disk.could_be_over():
            return None
        try:
            return await self.disk.check()
        except (ContainerStopped, *DOCKER_ERRORS) as exc:
            raise SandboxDied(f"cannot ask the size of container {self.container.short_id}: {exc}") from exc

    async def exec_root(
        self, argv: list[str], timeout: float = 120, workdir: str | None = None, env: dict[str, str] | None = None
    ) -> tuple[int, str]:
        """Run a program as root outside the agent's shell (a fresh process, clean environment). ``env``
        reaches it without showing in its command line, which any user in the container can read."""
        cmd = ["timeout", "-s", "KILL", str(max(1, int(timeout))), *argv]

        def _exec() -> tuple[int, str]:
            res = self.container.exec_run(cmd, user="root", workdir=workdir or "/", demux=False, environment=env)
            return res.exit_code, (res.output or b"").decode("utf-8", "replace")

        try:
            return await asyncio.to_thread(_exec)
        except DOCKER_ERRORS as exc:
            fault = await asyncio.to_thread(container_fault, self.container, f"root's exec failed: {exc}", exc)
            if isinstance(fault, ShellEnded):  # it runs, the engine answers: what refused root's exec is the agent's
                raise ShellUnstartable(f"{fault}: the container runs, its memory or pids full") from exc
            raise fault from exc

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
        """Unpack a tar archive into ``dest_dir`` (created if missing); ``owner`` gets the top-level entries ``top``."""
        try:
            try:
                ok = await asyncio.to_thread(self.container.put_archive, dest_dir, data)
            except docker.errors.NotFound:  # no such folder (the container is there): one exec to make it
                code, out = await self.exec_root(["mkdir", "-p", dest_dir])
                if code != 0:
                    raise SandboxError(f"cannot create {dest_dir} in the sandbox: {out.strip()}") from None
                ok = await asyncio.to_thread(self.container.put_archive, dest_dir, data)
        except DOCKER_ERRORS as exc:
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
        except DOCKER_ERRORS as exc:
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
        except DOCKER_ERRORS as exc:
            raise SandboxDied(f"read from container {self.container.short_id} failed: {exc}") from exc

    async def destroy(self) -> None:
        self.disk.stop()
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


def _create_and_start(
    client: docker.DockerClient, kwargs: dict[str, Any], before_start: Callable[[Container], None] | None = None
) -> Container:
    """``containers.run`` in its two steps, so that a container the engine made but could not start (a missing
    network, a refused device) is removed instead of left behind in the Created state; ``before_start`` runs
    between them (``disk_image``)."""
    container = client.containers.create(**{k: v for k, v in kwargs.items() if k != "detach"})
    try:
        if before_start is not None:
            before_start(container)
        container.start()
        container.reload()  # the init's pid (agent_uid)
    except BaseException:
        with contextlib.suppress(*DOCKER_ERRORS):
            container.remove(force=True)
        raise
    return container


def destroy_container(container: Container | str, client: docker.DockerClient | None = None) -> None:
    """Kill, then remove, a container; quiet if it is already gone. A failure (the engine unreachable)
    raises and the container stays among the live ones, so exit clean-up tries it again."""
    cid = container if isinstance(container, str) else container.id
    try:
        if isinstance(container, str):
            container = (client or docker_client()).containers.get(container)
        own_fs = disk_image.own_layer(container)  # unmounted by the engine's removal, else by ``release``
        try:
            container.kill()
        except docker.errors.APIError:
            pass  # not running any more
        container.remove(force=True, v=True)
        disk_image.release(own_fs)
    except docker.errors.NotFound:
        pass
    except docker.errors.APIError as exc:
        if exc.status_code != 409 or "in progress" not in str(exc):
            raise
        _wait_gone(cid, client)  # another process removes it (a sibling run reaping the same orphan)
    _live.discard(cid)


def _wait_gone(container_id: str, client: docker.DockerClient | None, timeout_s: float = 30) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            (client or docker_client()).containers.get(container_id)
        except docker.errors.NotFound:
            return
        time.sleep(0.2)
    raise SandboxError(f"container {container_id[:12]} was still being removed after {timeout_s:g} s")


def live_container_ids() -> set[str]:
    return set(_live)
