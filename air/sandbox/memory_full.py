"""Is a container's memory full of what no kill frees? Asked of the engine when neither a new shell nor root's
exec starts in a running container, every process of the agent killed first.

What no process holds (files in /tmp and /dev/shm, their kernel memory) stays when the OOM killer has killed
everything it can; a container whose memory is full of it cannot start a process, root's included. Only the
agent puts such things there (root's side of a container is its keep-alive and short execs), so a container
found that way is the agent's doing: its rollout ends with the no-score reward, not masked as a host failure.
The engine's own figures (``stats``, the memory cgroup's, on cgroup v1 and v2) decide it: an engine that does
not answer, a container not running, or memory with room left, and it stays the host's failure.
"""

from __future__ import annotations

import logging
from typing import Any

from docker.models.containers import Container

from air.sandbox.config import SHELL_ROOM
from air.sandbox.engine import DOCKER_ERRORS

log = logging.getLogger(__name__)


def memory_held_by_no_process(stats: dict[str, Any]) -> tuple[int, int]:
    """(bytes charged to the container that neither a process's own memory nor the page cache holds, its limit)
    from the engine's ``stats``: usage less anonymous memory (the OOM killer frees it) and file cache (reclaimed).
    tmpfs pages are neither (they count as shmem), nor is the kernel memory of files."""
    memory = stats.get("memory_stats") or {}
    figures = memory.get("stats") or {}

    def figure(*names: str) -> int:
        return next((int(figures[name]) for name in names if name in figures), 0)

    usage, limit = int(memory.get("usage") or 0), int(memory.get("limit") or 0)
    anonymous = figure("total_rss", "rss", "anon")  # cgroup v1 (hierarchical first), v2
    cache = figure("total_active_file", "active_file") + figure("total_inactive_file", "inactive_file")
    return max(0, usage - anonymous - cache), limit


def memory_full(container: Container) -> str | None:
    """How the running ``container``'s memory is full of what no kill frees (less than ``SHELL_ROOM`` left for a
    shell and root's exec), or None: it is not, or the engine cannot say."""
    try:
        container.reload()
        if container.status != "running":
            return None
        stats = container.stats(stream=False, one_shot=True)
    except DOCKER_ERRORS:
        return None
    held, limit = memory_held_by_no_process(stats)
    log.info("container %s: %d MiB of its %d MiB held by no process", container.short_id, held >> 20, limit >> 20)
    if not limit or limit - held >= SHELL_ROOM:
        return None
    return (
        f"the container's memory is full ({held >> 20} MiB of its {limit >> 20} MiB held by no process: files "
        "in /tmp and /dev/shm and their kernel memory), so no process can start in it, root's included"
    )
