"""Containers ready before they are needed, and nothing left behind.

- ``acquire`` hands out a warm sandbox at once (after a sub-millisecond shell check) and
  starts a replacement in the background; with none ready it starts one cold.
- ``release`` destroys a used sandbox (kill, then remove) on a background thread: containers are
  never reused, so no state leaks from one rollout into the next.
- ``reap_orphans`` removes containers whose owning process is gone (even after SIGKILL), found by
  the owner labels ``air.sandbox.container`` puts on every container; it runs when a pool starts.
- Every container this process created is removed at normal exit, on SIGINT and on SIGTERM.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import signal
import socket
import threading
from collections import deque
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import docker
import docker.errors
import psutil

from air.sandbox.config import LABEL, LABEL_HOST, LABEL_PID, LABEL_STARTED, SandboxConfig
from air.sandbox.container import Sandbox, destroy_container, docker_client, live_container_ids, require_image
from air.sandbox.errors import SandboxDied, SandboxError, SandboxImageMissing

log = logging.getLogger(__name__)

_destroyer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="air-destroy")
_pending: set[Future[Any]] = set()
_pending_lock = threading.Lock()


def destroy_in_background(sandbox_or_id: Sandbox | str) -> Future[Any]:
    """Destroy a container on a worker thread; the caller never waits for Docker."""
    if isinstance(sandbox_or_id, Sandbox):
        sandbox_or_id.shell.close()
        target: Any = sandbox_or_id.container
    else:
        target = sandbox_or_id
    future = _destroyer.submit(destroy_container, target)
    with _pending_lock:
        _pending.add(future)
    future.add_done_callback(_forget)
    return future


def _forget(future: Future[Any]) -> None:
    with _pending_lock:
        _pending.discard(future)
    if future.exception() is not None:
        log.warning("destroying a sandbox container failed: %s", future.exception())


def owner_alive(labels: dict[str, str]) -> bool:
    """Is the process named by a container's owner labels still the one that created it?"""
    try:
        pid = int(labels[LABEL_PID])
        started = float(labels[LABEL_STARTED])
        return abs(psutil.Process(pid).create_time() - started) < 1.0
    except (KeyError, ValueError, psutil.Error):
        return False


def reap_orphans(client: docker.DockerClient | None = None) -> list[str]:
    """Remove this host's air containers whose owning process has died; returns their ids.

    Other processes (prime-rl's env workers, one per env) create and remove containers meanwhile: one
    listed here may be gone before the SDK inspects it (``ignore_removed``). That race used to fail the
    first rollout of a worker with a 404 for a sibling's container."""
    client = client or docker_client()
    filters = {"label": [f"{LABEL}=1", f"{LABEL_HOST}={socket.gethostname()}"]}
    reaped = []
    for container in client.containers.list(all=True, filters=filters, ignore_removed=True):
        if not owner_alive(container.labels):
            destroy_container(container)
            reaped.append(container.id)
    if reaped:
        log.info("removed %d sandbox container(s) left by dead processes", len(reaped))
    return reaped


def cleanup_all(wait: bool = True) -> None:
    """Remove every container this process still owns (idempotent, synchronous)."""
    ids = live_container_ids()
    try:  # also by label: a start cancelled mid-way may have left one untracked
        filters = {"label": [f"{LABEL}=1", f"{LABEL_HOST}={socket.gethostname()}", f"{LABEL_PID}={os.getpid()}"]}
        ids |= {c.id for c in docker_client().containers.list(all=True, filters=filters, ignore_removed=True)}
    except (docker.errors.DockerException, SandboxError):
        pass
    for cid in ids:
        try:
            destroy_container(cid)
        except docker.errors.DockerException as exc:
            log.warning("could not remove sandbox container %s: %s", cid[:12], exc)
    if wait:
        with _pending_lock:
            pending = list(_pending)
        for future in pending:
            future.exception()  # waits


_handlers_installed = False


def install_exit_handlers() -> None:
    """Clean up at exit and on SIGTERM/SIGINT, chaining to whatever handler was there before."""
    global _handlers_installed
    if _handlers_installed:
        return
    _handlers_installed = True
    atexit.register(cleanup_all)
    if threading.current_thread() is not threading.main_thread():
        return  # signal handlers can only be set from the main thread; atexit still runs
    for signum in (signal.SIGTERM, signal.SIGINT):
        previous = signal.getsignal(signum)

        def handler(sig: int, frame: Any, previous: Any = previous) -> None:
            cleanup_all(wait=False)
            if callable(previous):
                previous(sig, frame)
            elif previous == signal.SIG_IGN:
                return
            else:  # default action: die of the signal, as the process would have
                signal.signal(sig, signal.SIG_DFL)
                signal.raise_signal(sig)

        signal.signal(signum, handler)


class SandboxPool:
    """Keeps ``size`` started sandboxes ready; hands each out once."""

    def __init__(self, config: SandboxConfig, size: int = 4, max_starting: int = 4) -> None:
        self.config = config
        self.size = size
        self._ready: deque[Sandbox] = deque()
        self._starting = 0
        self._start_slots = asyncio.Semaphore(max_starting)
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._started = False
        self._start_lock = asyncio.Lock()
        self._missing_image: SandboxImageMissing | None = None  # once seen, every acquire fails at once
        self.start_failures: list[str] = []

    async def start(self) -> SandboxPool:
        """Reap what dead runs left, install exit handlers, and begin filling the pool."""
        async with self._start_lock:  # rollouts acquire concurrently: all wait for the one start
            if not self._started:
                install_exit_handlers()
                try:
                    await asyncio.to_thread(reap_orphans)
                except docker.errors.DockerException as exc:  # housekeeping: never a reason to fail a rollout
                    log.warning("could not reap containers of dead runs: %s", exc)
                try:
                    await asyncio.to_thread(require_image, self.config)
                except SandboxImageMissing as exc:
                    self._missing_image = exc
                self._started = True
                self._refill()
        if self._missing_image is not None:
            raise self._missing_image
        return self

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def missing_image(self) -> SandboxImageMissing | None:
        """Set once the image was found missing: every acquire fails with it from then on."""
        return self._missing_image

    @property
    def ready_count(self) -> int:
        return len(self._ready)

    async def wait_ready(self, count: int | None = None, timeout: float = 60) -> None:
        """Wait until ``count`` (default: size) sandboxes are ready."""
        count = self.size if count is None else count
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self._ready) < count:
            if self.start_failures:
                raise SandboxError(f"sandboxes fail to start: {self.start_failures[-1]}")
            if loop.time() > deadline:
                raise TimeoutError(f"only {len(self._ready)}/{count} sandboxes ready after {timeout} s")
            await asyncio.sleep(0.02)

    async def acquire(self) -> Sandbox:
        """A started sandbox for one rollout: warm if one is ready, else started now."""
        if self._closed:
            raise SandboxError("pool is closed")
        await self.start()  # once; raises SandboxImageMissing from then on if the image is missing
        try:
            while self._ready:
                sandbox = self._ready.popleft()
                try:
                    check = await sandbox.run("true", timeout=5)
                    if check.exit_code == 0:
                        return sandbox
                except SandboxDied:
                    pass
                destroy_in_background(sandbox)  # went bad while waiting
            return await Sandbox.create(self.config)
        except SandboxImageMissing as exc:  # removed while the pool ran: no point in starting more
            self._missing_image = exc
            raise
        finally:
            self._refill()

    def release(self, sandbox: Sandbox) -> None:
        """Done with a sandbox: it is destroyed in the background, never reused."""
        destroy_in_background(sandbox)

    def _refill(self) -> None:
        if self._closed or self._missing_image is not None:
            return
        while len(self._ready) + self._starting < self.size:
            self._starting += 1
            task = asyncio.get_running_loop().create_task(self._start_one())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start_one(self) -> None:
        try:
            async with self._start_slots:
                sandbox = await Sandbox.create(self.config)
            if self._closed:
                destroy_in_background(sandbox)
            else:
                self._ready.append(sandbox)
                self.start_failures.clear()
        except SandboxImageMissing as exc:
            self._missing_image = exc
            self.start_failures.append(str(exc))
        except SandboxError as exc:
            self.start_failures.append(str(exc))
            log.warning("starting a sandbox failed: %s", exc)
        finally:
            self._starting -= 1

    async def close(self) -> None:
        """Stop filling and destroy the ready sandboxes (in-use ones belong to their holders)."""
        self._closed = True
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        futures = self._destroy_ready()
        await asyncio.gather(*(asyncio.wrap_future(f) for f in futures), return_exceptions=True)

    def abandon(self) -> None:
        """Give up a pool whose event loop is gone: stop filling, destroy its ready sandboxes on threads."""
        self._closed = True
        self._destroy_ready()

    def _destroy_ready(self) -> list[Future[Any]]:
        futures = [destroy_in_background(sb) for sb in self._ready]
        self._ready.clear()
        return futures
