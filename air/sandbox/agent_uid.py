"""The agent's uid: one per container, never one a host user or another container's agent has.

The kernel counts some limits per uid of the host, not per container: inotify instances and watches, epoll watches,
POSIX message queue bytes, queued signals. With every container's agent the image's uid 1000 (the host's first
user's, too), what one rollout held, another could not take, and the count was a channel between the two. So each
container's agent gets ``UID_BASE`` plus the host pid of the container's init (``State.Pid``): two live containers
of one engine never share a pid, and no host user's uid is near 2**30. (Engines in separate pid namespaces of one
kernel, Docker in Docker, may repeat a pid: their agents may then share a uid.) The change itself is root's, at the
first shell start, before any process of the agent exists (``root_side.as_user_argv``): the image's /etc/passwd
line of the agent takes the new uid, and the home folder and what is directly in it follow; files deeper down that
the image gave uid 1000 stay readable by the agent, not writable. Where the engine maps users into a namespace of
its own (``userns-remap``, rootless engines), that map holds 65,536 uids at most and the container keeps the
image's uid (root_side reads /proc/self/uid_map): the namespace's range is then shared by every container of that
engine, and per-user counts cross between them as before.
"""

from __future__ import annotations

from docker.models.containers import Container

UID_BASE = 1 << 30  # above every host's users and a default subordinate range (/etc/subuid: 100000 + 65536 k)


def agent_uid(container: Container, user: str) -> int | None:
    """The uid the agent ``user`` takes in ``container`` (its attrs read after start), or None to keep the image's:
    a user named by number, or an init pid the engine did not report."""
    pid = int((container.attrs.get("State") or {}).get("Pid") or 0)
    if user.isdigit() or pid <= 0:
        return None
    return UID_BASE + pid
