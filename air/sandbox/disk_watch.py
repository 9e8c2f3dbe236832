"""The container's writable size watched against its disk limit, where the engine cannot size a container and
this process cannot give it a file system of its own either (``disk_image``: not root on the engine's host, no loop
devices, or ``disk_layer`` "watch"). Where it can, the kernel keeps the limit and nothing here runs.

On overlay2 over ext4 (most hosts) no quota exists, so each check measures two ways and adds them up:

- A probe run as root in the container (``disk_probe``: one process for the container's life, asked each check)
  stats the entries (files, folders, links) under every folder the agent can write and counts the blocks each
  takes on the host's disk past its size (an empty folder's block, which the engine counts as 0 bytes; blocks
  reserved by ``fallocate -n`` past a file's end; one block at least, ``ENTRY_BYTES``, for each inode), and adds
  the blocks of files deleted but still open in the agent's processes (the ``/proc/PID/fd`` links ending in
  " (deleted)", a stat of the link; read by a fork of the probe that drops to the agent's uid, as root without
  CAP_SYS_PTRACE cannot read them). The probe walks by the directory's path, never follows a link, stops at
  ``MAX_ENTRIES``, at ``PROBE_BUDGET_S`` and once what it counted alone passes the limit.
- The engine's own size of the container's layer (an inspect with ``size=1``: it adds up the sizes of the files
  of the container's own layer, root's included; 1 ms for a task's workspace, some 5 us per file more), asked
  only when the probe found nothing wrong, with a timeout.

Each check asks both (the probe from the first check: it alone sees folders and reserved blocks, and asked only
every few checks it let 250,000 folders, 5x a 200m limit, through within one command).

A size that cannot be read is not "under the limit": the engine's ``SizeRw`` of -1 (its walk failed: a path
longer than PATH_MAX) or left out, a path the probe cannot open (ENAMETOOLONG), more than ``MAX_ENTRIES``
entries, a walk or an inspect past its budget, a process of the agent whose open files cannot be read
(made non-dumpable), a probe that failed: each is a ``problem``, and a problem counts as over the limit, with
its own message (what to delete). The watch's cost is bounded whatever the agent creates: the probe stops at
``MAX_ENTRIES`` or ``PROBE_BUDGET_S``, the inspect at its timeout, and a slow check pushes the next one back
by ``COST_FACTOR`` times its cost but never past ``disk_check_s``.

Checks run in a task of their own, never on a command's path: every ``disk_check_s`` at most, sooner as the
limit nears (``next_delay``). Over the limit (or with a problem), each time the size has grown since the check
before (with a problem: each check): every process of the agent but its shell is killed (the writer,
background jobs included) and the command in flight is interrupted as a timeout would be, with the message
at the end of its output; then the probe frees the blocks the agent's files reserve unused (``fallocate``: past
a file's end, never written inside it; open deleted files too), as the agent, content and sizes kept
(``disk_probe`` says how; a free cut short by its budget goes on at the next check). Commands still run, so
that the agent can delete files, but one that leaves the container over its limit fails with the message
(``Sandbox.run``), and the layer that evaluates asks ``Sandbox.over_disk_limit`` first. The sandbox and the
rollout go on: it is the agent's failure, nothing else.

What it cannot see: what lands between two checks. A writer allocating at R bytes a second passes the limit by
at most R times (the wait before the next check, ``MIN_DELAY_S`` near the limit, plus a check's cost, bounded by
the limit's worth of entries): checks come before ``FAST_WRITES`` could fill what is left, so a writer no faster
than that (a disk's writes; a folder bomb's ~64,000 folders a second) gets some 0.5-1 s of its rate past it
(measured: benchmarks/disk_overshoot.py). ``fallocate`` is not bound by a rate: one call reserves gigabytes at
once (``-n`` past the file's end, where ``max_file_size`` does not apply either): they stay on the host's disk
until the next check's stop frees them (measured: 8 GiB gone about 1 s after passing a 200m limit,
benchmarks/disk_fallocate.py); only a quota keeps them off it. Without ``-n`` the size grows too (the engine
counts it, ``max_file_size`` caps each file): the stop frees those blocks as well, and the sizes keep the agent
over its limit until it deletes. Also unseen: a deleted file kept only by a memory mapping (its fd closed), and
the open files of the evaluator's processes (``air-eval``, bounded by the evaluation's time). A sparse file
counts at its full length, as the engine counts it (``disk_probe`` says why). Entries under root-owned folders
the agent cannot write (root's own copies) count only by their bytes, through the engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

import docker.errors
import requests

from air.sandbox.disk_probe import (
    ENTRY_BYTES,
    FREE,
    MAX_ENTRIES,
    PATH_MAX,
    PROBE,
    PROBE_BUDGET_S,
    ROOTS_OF_IMAGE,
    ProbeSession,
    parse,
    parse_freed,
)
from air.sandbox.engine import DOCKER_ERRORS
from air.sandbox.root_side import kill_user_argv
from air.sandbox.storage import human_size

if TYPE_CHECKING:
    from docker.models.containers import Container

    from air.sandbox.config import SandboxConfig
    from air.sandbox.shell import Shell

log = logging.getLogger(__name__)

FAST_WRITES = 1 << 30  # bytes per second a fast disk takes: how soon what is left of the limit could be gone
MIN_DELAY_S = 0.5  # the shortest wait between two checks, near or over the limit
COST_FACTOR = 4  # a check waits up to this many times its own cost (never past disk_check_s): a probe is ~0.1 s
# What only a walk finds (folders, inodes) grows at most this fast (~64,000 entries a second at 4 KiB each, as a
# folder bomb makes them): a slow walk never pushes the next check past the time that takes to pass what is left.
PROBE_FAST = 256 << 20


class ContainerStopped(Exception):
    """The container is gone or no longer runs: nothing left to watch."""


@dataclass(frozen=True)
class Measure:
    """One check's result: bytes counted against the limit, or the problem that kept them from being counted."""

    used: int | None
    problem: str | None = None


class DiskWatch:
    """What one container has written, checked against ``config.disk`` (only where ``enabled``)."""

    def __init__(self, container: Container, config: SandboxConfig, shell: Shell, enabled: bool = False) -> None:
        self._container = container
        self._config = config
        self._shell = shell
        self.enabled = enabled
        self.limit = config.disk_bytes
        self.used: int | None = None  # bytes at the last check (None: never checked, or a problem)
        self.problem: str | None = None  # why the last check could not count them: as over the limit
        self.cost_s = 0.0  # how long the last check took
        self.checked_at = 0.0  # time.monotonic() of the last check
        self._lock = asyncio.Lock()  # one check at a time: the watch's, a command's, an evaluation's
        self._task: asyncio.Task[None] | None = None
        self._session: ProbeSession | None = None  # the container's probe, once started
        self._free_cut = False  # the last free stopped short (its budget): reserved blocks may be left
        self._image = str(getattr(container, "attrs", {}).get("Image", "")) if container is not None else ""

    @property
    def over(self) -> bool:
        """Over the limit at the last check, or not measurable then."""
        return self.enabled and (self.problem is not None or (self.used is not None and self.used > self.limit))

    def message(self) -> str:
        limit = human_size(self.limit)
        if self.problem is not None:
            return (
                f"the sandbox's disk use cannot be counted against its {limit} disk limit: {self.problem}. Until it "
                "can, every command fails, processes that write are killed and evaluations fail"
            )
        return (
            f"the sandbox holds {human_size(self.used or 0)} of its {limit} disk limit: delete files (rm) to go on. "
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
        if self._session is not None:
            self._session.close()
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
        last check (or not measurable), the agent's writers are stopped. Raises ``ContainerStopped`` or the
        engine's errors."""
        if not self.enabled:
            return None
        async with self._lock:
            before, was_over = self.used, self.over
            started = time.perf_counter()
            measure = await asyncio.to_thread(self._measure)
            self.cost_s, self.checked_at = time.perf_counter() - started, time.monotonic()
            self.used, self.problem = measure.used, measure.problem
            if not self.over:
                if was_over:
                    log.info("sandbox %s is back under its disk limit", self._container.short_id)
                return None
            note = self.message()
            if self.problem is not None or before is None or (self.used or 0) > before:
                if not was_over:
                    log.info("sandbox %s went over its disk limit: %s", self._container.short_id, note)
                # The command in flight first, as a timeout stops it: bash abandons the rest of a line (a loop
                # of writes) only when its child dies of SIGINT, never of the SIGKILL below. Then the rest.
                self._shell.halt(f"command stopped: {note}")
                async with self._shell.lock:
                    await self._stop_writers()
                    await asyncio.to_thread(self._free)  # the writers gone first: none reserves again meanwhile
            elif self._free_cut:  # the last free ran out of its budget: the rest now, though nothing grew
                async with self._shell.lock:
                    await asyncio.to_thread(self._free)
            return note

    def could_be_over(self) -> bool:
        """Whether the container could have passed its limit since the last check, at FAST_WRITES; never
        checked, or not measurable then, counts as could. Lets an evaluation skip asking when it cannot have."""
        if not self.enabled:
            return False
        if self.used is None:
            return True
        return self.used + FAST_WRITES * (time.monotonic() - self.checked_at) > self.limit

    def next_delay(self) -> float:
        """Seconds to the next check: ``disk_check_s`` at most, sooner when what is left could be written sooner;
        a slow check pushes it back (``COST_FACTOR``), never past ``disk_check_s``."""
        left = 0 if self.problem is not None else max(0, self.limit - (self.used or 0))
        soon = min(self._config.disk_check_s, max(MIN_DELAY_S, left / FAST_WRITES))
        # A slow check (a walk of many entries) backs off, but never for longer than a folder bomb needs to pass
        # what is left: near the limit, checks come every MIN_DELAY_S whatever they cost (each walk stops once its
        # entries alone pass the limit, so that cost is bounded by the limit).
        reach = max(MIN_DELAY_S, left / PROBE_FAST)
        return max(soon, min(COST_FACTOR * self.cost_s, self._config.disk_check_s, reach))

    def _measure(self) -> Measure:
        blocks, deleted, problem = self._probe()
        if problem is not None:
            return Measure(None, problem)
        size = self._engine_size()
        if isinstance(size, str):
            return Measure(None, size)
        return Measure(size + blocks + deleted)

    def _probe(self) -> tuple[int, int, str | None]:
        """(bytes past the engine's sizes, bytes of files deleted but open, problem) from the container's probe
        (``disk_probe``), started on first use and again when it is gone (asked once more at once: a probe that
        died is not the agent's problem)."""
        if self._session is None:
            enough = self.limit + 1 if self.limit else 1 << 62
            argv = ["python3", "-I", "-c", PROBE, self._config.user, str(MAX_ENTRIES), str(PROBE_BUDGET_S)]
            roots = json.dumps(ROOTS_OF_IMAGE.get(self._image, []))
            argv += [str(PATH_MAX), str(enough), roots, str(ENTRY_BYTES)]
            self._session = ProbeSession(self._container, argv)
        for attempt in (1, 2):
            try:
                return parse(self._session.ask(timeout=PROBE_BUDGET_S + 10), self._image)
            except docker.errors.NotFound as exc:
                raise ContainerStopped(f"container {self._container.short_id} no longer exists") from exc
            except docker.errors.APIError as exc:
                if exc.status_code == 409:  # "is not running"
                    raise ContainerStopped(f"container {self._container.short_id} no longer runs") from exc
                raise
            except TimeoutError:
                return 0, 0, f"counting its files took over {PROBE_BUDGET_S + 10:g} s: delete some"
            except OSError as exc:
                if attempt == 2:
                    return 0, 0, f"its files could not be counted ({exc})"
        raise AssertionError("unreachable")

    def _engine_size(self) -> int | str:
        """The engine's size of the container's own layer, or the problem that kept it from giving one."""
        api = self._container.client.api
        url = api._url("/containers/{0}/json", self._container.id)
        # docker-py's inspect_container takes no size argument: the same endpoint, asked with ?size=1.
        try:
            info = api._result(api._get(url, params={"size": 1}, timeout=PROBE_BUDGET_S), True)
        except docker.errors.NotFound as exc:
            raise ContainerStopped(f"container {self._container.short_id} no longer exists") from exc
        except requests.exceptions.Timeout:
            return f"the Docker engine took over {PROBE_BUDGET_S:g} s to size it: delete files"
        if not info.get("State", {}).get("Running"):
            raise ContainerStopped(f"container {self._container.short_id} no longer runs")
        size = info.get("SizeRw")
        if not isinstance(size, int) or size < 0:  # -1: the engine's walk failed (a path past PATH_MAX)
            return f"the Docker engine could not size it (SizeRw {size}): delete any path longer than {PATH_MAX} bytes"
        return size

    def _free(self) -> None:
        """Free the blocks reserved past the end of the agent's files (``fallocate -n``, open deleted files too):
        one call reserves gigabytes at once, so no check comes soon enough; freed at the stop, not at the agent's rm
        (``disk_probe``: as the agent, content, size and times kept)."""
        if self._session is None:
            return
        try:
            freed, files, problem = parse_freed(self._session.ask(timeout=PROBE_BUDGET_S + 10, request=FREE))
        except (OSError, *DOCKER_ERRORS) as exc:  # the next check tries again
            log.warning("could not free reserved blocks in sandbox %s: %s", self._container.short_id, exc)
            self._free_cut = True
            return
        self._free_cut = problem is not None
        if freed or problem:
            note = f"; {problem}" if problem else ""
            log.info(
                "sandbox %s: freed %s reserved past the end of %d files%s",
                self._container.short_id,
                human_size(freed),
                files,
                note,
            )

    async def _stop_writers(self) -> None:
        argv = kill_user_argv(self._config.user, spare_pid=self._shell.pid or 0)  # all the agent's but its shell
        try:  # root's: an exec of the agent's uid is the agent's to stop (root_side)
            await asyncio.to_thread(self._container.exec_run, argv, user="root", workdir="/")
        except DOCKER_ERRORS as exc:  # the next check tries again
            log.warning("could not stop the writers in sandbox %s: %s", self._container.short_id, exc)

    async def _watch(self) -> None:
        # The first check waits its turn: a new container holds nothing of the agent's (and one that is asked sooner,
        # by an evaluation or a command, is checked then).
        await asyncio.sleep(self.next_delay())
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
