"""Whose fault is a container that stopped answering: the engine's word decides, and only proof masks.

A rollout is masked (dropped from training) only on positive evidence that the host or the engine failed: the engine
does not answer, or the container was stopped or removed from outside. A container that still runs, or that the
OOM killer stopped (its memory is the agent's to fill), is never the host's: a policy that could turn a bad rollout
into a masked one would learn to.
"""

from __future__ import annotations

import docker.errors
from docker.models.containers import Container

from air.sandbox.engine import DOCKER_ERRORS, looks_like_engine_failure
from air.sandbox.errors import SandboxDied, SandboxError, ShellEnded, ShellUnstartable


def container_fault(container: Container, why: str, exc: BaseException | None = None) -> SandboxError:
    """The error for ``why`` by the engine's word on ``container`` (blocking: one ``reload``): ``ShellEnded`` while
    it runs (a new shell can start in it), ``ShellUnstartable`` when the OOM killer stopped it (the agent's memory),
    else ``SandboxDied`` (the host's: stopped or removed from outside, or the engine cannot say). A call that failed
    on the engine's connection (``exc``: refused, timed out) is the host's whatever the container does."""
    if exc is not None and looks_like_engine_failure(exc):
        return SandboxDied(f"{why} [container {container.short_id}]")
    try:
        container.reload()
        state = container.attrs.get("State", {})
        status = container.status
        if status == "running":
            return ShellEnded(f"{why} [container {container.short_id}]")
        why += f"; container {status} (exit code {state.get('ExitCode')}, OOMKilled={state.get('OOMKilled')})"
        if state.get("OOMKilled") and status in ("exited", "dead"):
            return ShellUnstartable(f"{why}: the memory the agent fills ran out [container {container.short_id}]")
    except docker.errors.NotFound:
        why += "; container no longer exists"
    except DOCKER_ERRORS as exc:
        why += f"; container state unknown: {exc}"
    return SandboxDied(f"{why} [container {container.short_id}]")
