"""Nothing left behind: containers destroyed in the background, removals retried, dead runs' reaped.

- ``destroy_in_background`` removes a used container on a worker thread. When that fails (the engine is
  unreachable) the id is kept and the removal tried again: when the engine answers again
  (``retry_failed_removals``, called by the pool), at exit (``cleanup_all``), and, if this process dies
  first, by the next run's ``reap_orphans``.
- ``reap_orphans`` removes containers whose owning process is gone (even after SIGKILL), found by the
  owner labels ``air.sandbox.container`` puts on every container; it runs when a pool starts.
- Every container this process created is removed at normal exit, on SIGINT and on SIGTERM.
- A container's own file system (``disk_image``) goes with it: the engine's removal of its layer unmounts it (the
  loop device and the unlinked image with it); ``destroy_container`` unmounts one an engine left behind.
"""

from __future__ import annotations

import atexit
import logging
import os
import re
import signal
import socket
import threading
from concurrent import futures
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import datetime
from typing import Any

import docker
import psutil

from air.sandbox import disk_image
from air.sandbox.config import LABEL, LABEL_HOST, LABEL_PID, LABEL_STARTED
from air.sandbox.container import Sandbox, destroy_container, docker_client, live_container_ids
from air.sandbox.engine import DOCKER_ERRORS, engine_answers, looks_like_engine_failure, unreachable_message
from air.sandbox.errors import SandboxError

log = logging.getLogger(__name__)

_destroyer = ThreadPoolExecutor(max_workers=4, thread_name_prefix="air-destroy")
_pending: set[Future[Any]] = set()
_pending_lock = threading.Lock()
_failed: set[str] = set()  # ids whose removal failed: tried again (see module docstring)
_said_left: set[str] = set()  # left behind with the engine away, and said so once


def destroy_in_background(sandbox_or_id: Sandbox | str) -> Future[Any]:
    """Destroy a container on a worker thread; the caller never waits for Docker."""
    if isinstance(sandbox_or_id, Sandbox):
        sandbox_or_id.disk.stop()
        sandbox_or_id.shell.close()
        target: Any = sandbox_or_id.container
        cid = sandbox_or_id.id
    else:
        target = cid = sandbox_or_id
    future = _destroyer.submit(destroy_container, target)
    with _pending_lock:
        _pending.add(future)
    future.add_done_callback(lambda f: _forget(f, cid))
    return future


def wait_for_removals(timeout: float | None = None) -> bool:
    """Wait for the background removals started so far (blocking); False if some still run after ``timeout``."""
    with _pending_lock:
        pending = list(_pending)
    return not futures.wait(pending, timeout=timeout).not_done


def _forget(future: Future[Any], cid: str) -> None:
    with _pending_lock:
        _pending.discard(future)
    exc = future.exception()
    if exc is None:
        return
    with _pending_lock:
        _failed.add(cid)
    if looks_like_engine_failure(exc):  # the pool has said once that the engine is gone
        log.debug("removing container %s failed, to be retried: %s", cid[:12], exc)
    else:
        log.warning("removing sandbox container %s failed (to be retried): %s", cid[:12], exc)


def note_failed_removal(container_id: str) -> None:
    """A container to remove once the engine answers (one the pool gave up while the engine was away)."""
    with _pending_lock:
        _failed.add(container_id)


def failed_removals() -> set[str]:
    with _pending_lock:
        return set(_failed)


def retry_failed_removals() -> tuple[int, int]:
    """Try the failed removals again (blocking); returns (removed, still failing)."""
    removed = failing = 0
    for cid in failed_removals():
        try:
            destroy_container(cid)
        except DOCKER_ERRORS as exc:
            failing += 1
            log.debug("removing container %s failed again: %s", cid[:12], exc)
            continue
        removed += 1
        with _pending_lock:
            _failed.discard(cid)
    return removed, failing


def owned_filters() -> dict[str, list[str]]:
    """Docker filters matching the containers this process created."""
    return {"label": [f"{LABEL}=1", f"{LABEL_HOST}={socket.gethostname()}", f"{LABEL_PID}={os.getpid()}"]}


def engine_time(text: str) -> datetime:
    """A Docker timestamp (``2026-11-25T03:32:14.761819895Z``: nanoseconds, which datetime cannot hold)."""
    match = re.fullmatch(r"([^.Z+]+)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)?", text.strip())
    if match is None:
        raise ValueError(f"not a Docker timestamp: {text!r}")
    base, fraction, zone = match.groups()
    stamp = f"{base}.{(fraction or '0')[:6].ljust(6, '0')}{'+00:00' if zone in (None, 'Z') else zone}"
    return datetime.fromisoformat(stamp)


def remove_stopped_owned(client: docker.DockerClient | None = None) -> int:
    """Remove this process's containers an engine restart stopped (exited or dead), and the ones a start
    the restart cut off left ``created``: those made before now by the engine's clock. A start under way
    now is ``created`` too for a moment, and is left to run."""
    client = client or docker_client()
    now = engine_time(client.info()["SystemTime"])
    owned = client.containers.list(all=True, filters=owned_filters(), ignore_removed=True)
    stopped = [
        c
        for c in owned
        if c.status in ("exited", "dead") or (c.status == "created" and engine_time(c.attrs["Created"]) < now)
    ]
    for container in stopped:
        destroy_container(container)
        with _pending_lock:
            _failed.discard(container.id)
    return len(stopped)


def owner_alive(labels: dict[str, str]) -> bool:
    """Is the process named by a container's owner labels still the one that created it?"""
    try:
        pid = int(labels[LABEL_PID])
        started = float(labels[LABEL_STARTED])
        # 2 s, not 1: psutil adds /proc/stat's btime, whole seconds that follow the wall clock, so a clock slewed
        # across a second makes another process see a live owner's start exactly 1 s off.
        return abs(psutil.Process(pid).create_time() - started) < 2.0
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
            try:
                destroy_container(container)
            except (*DOCKER_ERRORS, SandboxError) as exc:  # one container's failure leaves the others to reap
                log.warning("could not remove container %s of a dead run: %s", container.short_id, exc)
                continue
            reaped.append(container.id)
    disk_image.sweep(client)  # an image a killed process made but never unlinked (its container's layer: above)
    if reaped:
        log.info("removed %d sandbox container(s) left by dead processes", len(reaped))
    return reaped


def cleanup_all(wait: bool = True) -> None:
    """Remove every container this process still owns (idempotent, synchronous). With the engine away,
    one line says what is left and what removes it."""
    ids = live_container_ids() | failed_removals()
    try:  # also by label: a start cancelled mid-way may have left one untracked
        ids |= {c.id for c in docker_client().containers.list(all=True, filters=owned_filters(), ignore_removed=True)}
    except (*DOCKER_ERRORS, SandboxError):
        if ids and not engine_answers():
            if ids <= _said_left:
                return
            _said_left.update(ids)
            log.warning(
                "%d sandbox container(s) could not be removed: %s. The next run removes them when it starts, "
                "or `uv run air clean` does.",
                len(ids),
                unreachable_message(),
            )
            return
    left = 0
    for cid in ids:
        try:
            destroy_container(cid)
            with _pending_lock:
                _failed.discard(cid)
        except DOCKER_ERRORS as exc:
            left += 1
            log.debug("could not remove sandbox container %s: %s", cid[:12], exc)
    if left:
        log.warning("%d sandbox container(s) could not be removed; `uv run air clean` removes them", left)
    if wait:
        wait_for_removals()


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
