"""The container's writable size watched against its disk limit, where the engine cannot size a container.

On overlay2 over ext4 (most hosts) no quota exists, so the watch asks the engine what the container has written
(an inspect with its size: the engine adds up the files of the container's own layer, root's included, as a
quota would count them; about 1 ms for a task's workspace, some 5 us more per file written: 20 ms for a pip
install's 5,000 files). A task of its own does it, never on a command's path: every ``disk_check_s`` at most,
sooner as the limit nears (``next_delay``), and never more often than twenty times the last check's own cost.

Over the limit, each time the size has grown since the check before: every process of the agent but its shell
is killed (the writer, background jobs included) and the command in flight is interrupted as a timeout would be,
with the message at the end of its output. Commands still run, so that the agent can delete files, but one that
leaves the container over its limit fails with the message (``Sandbox.run``), and the layer that evaluates asks
``Sandbox.over_disk_limit`` first. The sandbox and the rollout go on: it is the agent's failure, nothing else.

What it cannot see: what lands between two checks (near the limit they come every half second: a fast writer
gets that far past it, each file no further than ``max_file_size``), and a file deleted while a process keeps it
open (each such file bounded the same way). A sparse file counts at its full length, as the engine counts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING

import docker.errors

from air.sandbox.engine import DOCKER_ERRORS
from air.sandbox.protocol import kill_agent_argv
from air.sandbox.storage import human_size

if TYPE_CHECKING:
    from docker.models.containers import Container

    from air.sandbox.config import SandboxConfig
    from air.sandbox.shell import Shell

log = logging.getLogger(__name__)

FAST_WRITES = 1 << 30  # bytes per second a fast disk takes: how soon what is left of the limit could be gone
MIN_DELAY_S = 0.5  # the shortest wait between two checks, near or over the limit
COST_FACTOR = 20  # a check waits at least this many times its own cost: the engine walks at most 5% of the time


class ContainerStopped(Exception):
    """The container is gone or no longer runs: nothing left to watch."""


class DiskWatch:
    """What one container has written, checked against ``config.disk`` (only where ``enabled``)."""

    def __init__(self, container: Container, config: SandboxConfig, shell: Shell, enabled: bool = False) -> None:
        self._container = container
        self._config = config
        self._shell = shell
        self.enabled = enabled
        self.limit = config.disk_bytes
        self.used: int | None = None  # bytes at the last check
        self.cost_s = 0.0  # how long the last check took
        self.checked_at = 0.0  # time.monotonic() of the last check
        self._lock = asyncio.Lock()  # one check at a time: the watch's, a command's, an evaluation's
        self._task: asyncio.Task[None] | None = None

    @property
    def over(self) -> bool:
        """Over the limit at the last check."""
        return self.enabled and self.used is not None and self.used > self.limit

    def message(self) -> str:
        used = human_size(self.used or 0)
        return (
            f"the sandbox holds {used} of its {human_size(self.limit)} disk limit: delete files (rm) to go on. "
            "Until it fits again every command fails, processes that write are killed and evaluations fail"
        )

    def start(self) -> None:
        """Begin watching in the running event loop (once; nothing when not enabled)."""
        if self.enabled and self._task is None:
            name = f"disk watch {self._container.short_id}"
            self._task = asyncio.get_running_loop().create_task(self._watch(), name=name)

    def stop(self) -> None:
        """Stop for good; safe from any thread (the container is being removed)."""
        self.enabled = False
        task, self._task = self._task, None
        if task is None or task.done():
            return
        loop = task.get_loop()
        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile: the task went with it
            if _running_loop() is loop:
                task.cancel()
            else:
                loop.call_soon_threadsafe(task.cancel)

    async def check(self) -> str | None:
        """Measure now: None while the container fits its limit, else the message. Over it and grown since the
        last check, the agent's writers are stopped. Raises ``ContainerStopped`` or the engine's errors."""
        if not self.enabled:
            return None
        async with self._lock:
            before = self.used
            started = time.perf_counter()
            used = await asyncio.to_thread(self._measure)
            self.cost_s, self.used, self.checked_at = time.perf_counter() - started, used, time.monotonic()
            if used <= self.limit:
                if before is not None and before > self.limit:
                    log.info("sandbox %s is back under its disk limit", self._container.short_id)
                return None
            note = self.message()
            if before is None or used > before:
                if before is None or before <= self.limit:
                    log.info("sandbox %s went over its disk limit: %s", self._container.short_id, note)
                # The command in flight first, as a timeout stops it: bash abandons the rest of a line (a loop
                # of writes) only when its child dies of SIGINT, never of the SIGKILL below. Then the rest.
                self._shell.halt(f"command stopped: {note}")
                async with self._shell.lock:
                    await self._stop_writers()
            return note

    def could_be_over(self) -> bool:
        """Whether the container could have passed its limit since the last check, at FAST_WRITES; never
        checked counts as could. Lets an evaluation skip asking the engine when it cannot have."""
        if not self.enabled:
            return False
        if self.used is None:
            return True
        return self.used + FAST_WRITES * (time.monotonic() - self.checked_at) > self.limit

    def next_delay(self) -> float:
        """Seconds to the next check: ``disk_check_s`` at most, sooner when what is left could be written sooner."""
        left = max(0, self.limit - (self.used or 0))
        soon = min(self._config.disk_check_s, max(MIN_DELAY_S, left / FAST_WRITES))
        return max(soon, COST_FACTOR * self.cost_s)

    def _measure(self) -> int:
        api = self._container.client.api
        # docker-py's inspect_container takes no size argument: the same endpoint, asked with ?size=1.
        try:
            info = api._result(api._get(api._url("/containers/{0}/json", self._container.id), params={"size": 1}), True)
        except docker.errors.NotFound as exc:
            raise ContainerStopped(f"container {self._container.short_id} no longer exists") from exc
        if not info.get("State", {}).get("Running"):
            raise ContainerStopped(f"container {self._container.short_id} no longer runs")
        return int(info.get("SizeRw") or 0)  # left out while nothing was written

    async def _stop_writers(self) -> None:
        argv = kill_agent_argv(spare_pid=self._shell.pid or 0)  # every process of the agent but its shell
        try:
            await asyncio.to_thread(self._container.exec_run, argv, user=self._config.user)
        except DOCKER_ERRORS as exc:  # the next check tries again
            log.warning("could not stop the writers in sandbox %s: %s", self._container.short_id, exc)

    async def _watch(self) -> None:
        while True:
            try:
                await self.check()
            except ContainerStopped:
                return
            except DOCKER_ERRORS as exc:  # the engine's trouble is the pool's to find; try again later
                log.debug("disk check of sandbox %s failed: %s", self._container.short_id, exc)
            await asyncio.sleep(self.next_delay())


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
