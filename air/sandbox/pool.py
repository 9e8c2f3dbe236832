"""Containers ready before they are needed, and a Docker engine that may go away.

- ``acquire`` hands out a warm sandbox at once (after a shell check of about 1 ms) and starts a
  replacement in the background; with none ready it starts one cold.
- ``release`` destroys a used sandbox in the background (``air.sandbox.removal``): containers are never
  reused, so no state leaks from one rollout into the next.
- The engine: a failed Docker call, or a ready container found dead, makes the pool ask the engine
  (:func:`air.sandbox.engine.engine_answers`). If it does not answer, or the containers nobody used died
  together (it restarted), the pool's *generation* moves on: sandboxes started before are lost, the ready
  ones dropped, and :meth:`engine_fault` names the engine as the cause of the rollouts that ran in them.
  New rollouts wait for the engine (``engine_wait_s``, then :class:`EngineGone`); once it answers again,
  the pool removes what it stopped, retries the removals that failed and warms fresh containers.
  An engine that never answered is not waited for: the first acquire raises :class:`EngineAbsent` at once.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from concurrent.futures import Future
from typing import Any

from air.sandbox.config import SandboxConfig
from air.sandbox.container import Sandbox, docker_client, require_image, reset_docker_client
from air.sandbox.engine import DOCKER_ERRORS, engine_address, engine_answers, require_engine, unreachable_message
from air.sandbox.errors import (
    EngineGone,
    EngineUnreachable,
    SandboxDied,
    SandboxError,
    SandboxesUnavailable,
    SandboxImageMissing,
    SandboxStartError,
)
from air.sandbox.removal import (
    destroy_in_background,
    install_exit_handlers,
    note_failed_removal,
    owned_filters,
    reap_orphans,
    remove_stopped_owned,
    retry_failed_removals,
)

log = logging.getLogger(__name__)

ENGINE_POLL_S = 1.0  # how often a pool whose engine is away asks again


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
        self._unavailable: SandboxesUnavailable | None = None  # once seen, every acquire fails at once
        self.start_failures: list[str] = []
        # The engine: generation moves on each time it is lost; sandboxes of an older one are dead.
        self.generation = 0
        self.engine_losses = 0
        self._engine_ok = asyncio.Event()
        self._engine_ok.set()
        self._lost_at = 0.0
        self._check: asyncio.Future[None] | None = None
        self._recovery: asyncio.Task[None] | None = None

    async def start(self) -> SandboxPool:
        """Reap what dead runs left, install exit handlers, and begin filling the pool."""
        async with self._start_lock:  # rollouts acquire concurrently: all wait for the one start
            if not self._started:
                # Never answered: EngineAbsent now, not engine_wait_s (minutes) of waiting for an engine that
                # was never there. An engine lost later is waited for (_lose_engine).
                await asyncio.to_thread(require_engine)
                install_exit_handlers()
                try:
                    await asyncio.to_thread(reap_orphans)
                except (*DOCKER_ERRORS, SandboxError) as exc:  # housekeeping: never a reason to fail a rollout
                    log.warning("could not reap containers of dead runs: %s", exc)
                try:
                    await asyncio.to_thread(require_image, self.config)
                except SandboxImageMissing as exc:
                    self._unavailable = exc
                except SandboxStartError:
                    await self._run_check()  # no engine yet: acquire waits for it
                self._started = True
                self._refill()
        if self._unavailable is not None:
            raise self._unavailable
        return self

    async def __aenter__(self) -> SandboxPool:
        return await self.start()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def unavailable(self) -> SandboxesUnavailable | None:
        """Set once no sandbox can start (the image is missing): every acquire fails with it from then on."""
        return self._unavailable

    @property
    def engine_ok(self) -> bool:
        return self._engine_ok.is_set()

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
        """A started sandbox for one rollout: warm if one is ready, else started now. While the engine is
        away it waits for it (``engine_wait_s``), then raises :class:`EngineGone`."""
        if self._closed:
            raise SandboxError("pool is closed")
        await self.start()  # once; raises SandboxImageMissing from then on if the image is missing
        deadline = asyncio.get_running_loop().time() + self.config.engine_wait_s
        try:
            while True:
                await self._wait_for_engine(deadline)
                try:
                    sandbox = await self._take_ready()
                    if sandbox is None:
                        # A dead ready one may just have shown the engine restarted: its clean-up runs first
                        # (it would take a container being created now for one the restart stopped).
                        await self._wait_for_engine(deadline)
                        sandbox = await self._create()
                    return sandbox
                except SandboxImageMissing as exc:  # removed while the pool ran: no point in starting more
                    self._unavailable = exc
                    raise
                except (SandboxError, *DOCKER_ERRORS) as exc:
                    if await self.engine_fault(None, exc) is None:
                        raise  # the engine answers: this failure is the container's own
        finally:
            self._refill()

    async def _take_ready(self) -> Sandbox | None:
        """A warm sandbox that still answers, or None."""
        while self._ready:
            sandbox = self._ready.popleft()
            try:
                check = await sandbox.run("true", timeout=5)
                if check.exit_code == 0:
                    return sandbox
            except SandboxDied as exc:
                await self.engine_fault(sandbox, exc)  # one dead, maybe all: the engine is asked once
            destroy_in_background(sandbox)  # went bad while waiting
        return None

    async def _create(self) -> Sandbox:
        """A new container, stamped with the engine generation it was started in."""
        generation = self.generation
        sandbox = await Sandbox.create(self.config)
        sandbox.generation = generation
        return sandbox

    def release(self, sandbox: Sandbox) -> None:
        """Done with a sandbox: it is destroyed in the background, never reused."""
        destroy_in_background(sandbox)

    # --- the engine -------------------------------------------------------------------------------

    async def engine_fault(self, sandbox: Sandbox | None, exc: BaseException) -> EngineUnreachable | None:
        """Was the failure ``exc`` (of a call in ``sandbox``, if any) the engine's doing? If so, the error
        that says so, for the rollout's record; None if the engine answers and ``sandbox`` is of its
        current generation (the failure is the container's own)."""
        if self._engine_ok.is_set() and not self._outlived(sandbox):
            await self._check_engine()
        if self._engine_ok.is_set() and not self._outlived(sandbox):
            return None
        fault = EngineUnreachable(f"{unreachable_message()}: the container and the work in it were lost")
        fault.__cause__ = exc
        return fault

    def _outlived(self, sandbox: Sandbox | None) -> bool:
        """Was ``sandbox`` started before the engine was last lost (so it is gone with it)?"""
        return sandbox is not None and sandbox.generation < self.generation

    async def _check_engine(self) -> None:
        """Ask the engine once for all the calls that failed together."""
        if self._check is None or self._check.done():
            self._check = asyncio.ensure_future(self._run_check())
        await asyncio.shield(self._check)

    async def _run_check(self) -> None:
        if not await asyncio.to_thread(engine_answers):
            self._lose_engine(restarted=False)
            return
        if not self._ready:
            return
        try:
            running = await asyncio.to_thread(self._running_ids)
        except (*DOCKER_ERRORS, SandboxError):
            self._lose_engine(restarted=False)
            return
        if any(sandbox.id not in running for sandbox in self._ready):
            # Containers nobody used died together: the engine restarted between two of our calls.
            self._lose_engine(restarted=True)

    def _running_ids(self) -> set[str]:
        filters = {**owned_filters(), "status": ["running"]}
        return {c.id for c in docker_client().containers.list(filters=filters, ignore_removed=True)}

    def _lose_engine(self, restarted: bool) -> None:
        if not self._engine_ok.is_set():
            return
        loop = asyncio.get_running_loop()
        self._engine_ok.clear()
        self.generation += 1
        self.engine_losses += 1
        self._lost_at = loop.time()
        for sandbox in self._ready:  # started before: dead, or (engine cut off) to be removed once it answers
            sandbox.shell.close()
            note_failed_removal(sandbox.id)
        self._ready.clear()
        what = "restarted and stopped its containers" if restarted else "stopped answering"
        log.warning(
            "Docker engine at %s %s: the rollouts in its containers are lost; new rollouts wait up to %g s for it",
            engine_address(),
            what,
            self.config.engine_wait_s,
        )
        if self._recovery is None or self._recovery.done():
            self._recovery = loop.create_task(self._await_engine())

    async def _await_engine(self) -> None:
        while not self._closed:
            if await asyncio.to_thread(engine_answers):
                await self._engine_back()
                return
            await asyncio.sleep(ENGINE_POLL_S)

    async def _engine_back(self) -> None:
        reset_docker_client()  # no pooled connection from before the restart
        removed = failing = 0
        try:
            removed += await asyncio.to_thread(remove_stopped_owned)
            done, failing = await asyncio.to_thread(retry_failed_removals)
            removed += done
            await asyncio.to_thread(require_image, self.config)  # another engine may lack it
        except SandboxImageMissing as exc:
            self._unavailable = exc
        except (*DOCKER_ERRORS, SandboxError) as exc:
            log.warning("cleaning up after the Docker engine came back failed: %s", exc)
        waited = asyncio.get_running_loop().time() - self._lost_at
        log.warning(
            "Docker engine answers again after %.0f s: removed %d container(s) it had stopped%s; starting fresh ones",
            waited,
            removed,
            f" ({failing} removal(s) still failing)" if failing else "",
        )
        self._engine_ok.set()
        self._refill()

    async def _wait_for_engine(self, deadline: float) -> None:
        if self._engine_ok.is_set():
            return
        loop = asyncio.get_running_loop()
        try:
            await asyncio.wait_for(self._engine_ok.wait(), max(0.0, deadline - loop.time()))
        except TimeoutError:
            raise EngineGone(
                f"{unreachable_message()} for {loop.time() - self._lost_at:.0f} s (the env's engine_wait is "
                f"{self.config.engine_wait_s:g} s): no sandbox can start. Start the engine (`systemctl start "
                "docker` or `dockerd &`) and run again."
            ) from None
        if self._unavailable is not None:
            raise self._unavailable

    # --- warm sandboxes ---------------------------------------------------------------------------

    def _refill(self) -> None:
        if self._closed or self._unavailable is not None or not self._engine_ok.is_set():
            return
        while len(self._ready) + self._starting < self.size:
            self._starting += 1
            task = asyncio.get_running_loop().create_task(self._start_one())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _start_one(self) -> None:
        try:
            async with self._start_slots:
                if self._closed:
                    return
                sandbox = await self._create()
            if self._closed or self._outlived(sandbox):  # the engine was lost meanwhile
                destroy_in_background(sandbox)
            else:
                self._ready.append(sandbox)
                self.start_failures.clear()
        except SandboxImageMissing as exc:
            self._unavailable = exc
            self.start_failures.append(str(exc))
        except (SandboxError, *DOCKER_ERRORS) as exc:
            if await self.engine_fault(None, exc) is None:  # an engine lost is said once, by the pool
                self.start_failures.append(str(exc))
                log.warning("starting a sandbox failed: %s", exc)
        except RuntimeError as exc:
            # Ctrl-C: asyncio.run tears the loop down and shuts its thread pool while starts are in flight.
            # Nobody awaits this task any more (its error would print a traceback at exit, one per start);
            # what it made is tracked and removed by the exit clean-up.
            log.debug("a sandbox start ended with the event loop: %s", exc)
        finally:
            self._starting -= 1

    async def close(self) -> None:
        """Stop filling and destroy the ready sandboxes (in-use ones belong to their holders)."""
        self._closed = True
        if self._recovery is not None:
            self._recovery.cancel()
            await asyncio.gather(self._recovery, return_exceptions=True)
        # Starts under way finish and remove what they made: cancelled, the Docker call would still create
        # a container on its thread, one nobody tracks any more.
        _, late = await asyncio.wait(self._tasks, timeout=60) if self._tasks else (set(), set())
        for task in late:
            task.cancel()
        futures = self._destroy_ready()
        await asyncio.gather(*(asyncio.wrap_future(f) for f in futures), return_exceptions=True)
        if self._engine_ok.is_set():
            await asyncio.to_thread(retry_failed_removals)

    def abandon(self) -> None:
        """Give up a pool whose event loop is gone: stop filling, destroy its ready sandboxes on threads."""
        self._closed = True
        self._destroy_ready()

    def _destroy_ready(self) -> list[Future[Any]]:
        futures = [destroy_in_background(sb) for sb in self._ready]
        self._ready.clear()
        return futures
