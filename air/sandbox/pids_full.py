"""Are a container's pids all taken? Asked of the engine before a new shell starts and after a timeout.

A fork bomb holds every pid of its container (``pids_limit``): a new shell then starts (an exec gets in: the limit
is checked at fork) but cannot run a command, and waits out its readiness check (30 s) before root kills the agent's
processes; a timed-out command's tree is killed, but forks that its dying processes left outside it (reparented to
the container's init) still hold the pids, and the next command could not start. The engine's count (``stats``:
the pids cgroup's) says so at once, so root kills them first.
"""

from __future__ import annotations

import logging

from docker.models.containers import Container

from air.sandbox.engine import DOCKER_ERRORS

log = logging.getLogger(__name__)

# Pids a shell needs to work: itself, a command's fork, a pipe's second process, root's exec beside them.
SHELL_PIDS = 4


def pids_full(container: Container) -> bool:
    """Whether fewer than ``SHELL_PIDS`` of the running ``container``'s pids are free (False where the engine
    cannot say: the caller's own checks still decide)."""
    try:
        stats = container.stats(stream=False, one_shot=True)
    except DOCKER_ERRORS:
        return False
    pids = stats.get("pids_stats") or {}
    current, limit = int(pids.get("current") or 0), int(pids.get("limit") or 0)
    if not limit or limit - current >= SHELL_PIDS:
        return False
    log.info("container %s: %d of its %d pids taken", container.short_id, current, limit)
    return True
