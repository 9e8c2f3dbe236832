"""The container's keep-alive: root's process beside the init that holds the container up for its ``ttl_s`` and, when
the engine signals it, kills every process of the agent.

Root's ``docker exec`` is a new process in the container, and a new process needs a pid (the runtime's ``runc init``
clones as it joins the container): with a fork bomb holding every pid, or an OOM storm, the exec fails ("read
init-p: connection reset by peer") as often as not, and three of root's kills in a row could all fail to start (the
rollout then ended as the agent's, though the agent had no more chance of a shell). The keep-alive already runs: the
engine's kill of the container with SIGUSR1 reaches the init, which passes it on to its child, the keep-alive, whose
trap kills in passes with builtins only (``root_side.KILL_PASSES``) and needs no new process. When done it names
itself ``air-freed-<rounds>``; the engine's ``top`` (read from the host, no process in the container either) shows
that name, so the caller waits for this round to end before a new shell starts (one started before would be killed
by it). A container made otherwise (its command not ``keep_alive_argv``'s) is never signalled: its init's child
would end of SIGUSR1, and the container with it. The agent can neither signal root's processes nor pass for the
keep-alive: only the init's child (the init by the engine's ``State.Pid``) that runs as the init's user counts.
"""

from __future__ import annotations

import time

from docker.models.containers import Container

from air.sandbox.root_side import KILL_PASSES

FREED_NAME = "air-freed-"
TOP_ARGS = "-eo pid,ppid,uid,comm"
FREE_WAIT_S = 15.0  # the passes' 10 s, and a loaded host's slack

# The sleeper is root's child, waited for: a trapped signal ends ``wait`` at once (bash's manual), so the trap runs.
_KEEP_ALIVE = (
    r"""
exec </dev/null >/dev/null 2>&1
ttl=$1; user=$2; round=0
"""
    + KILL_PASSES
    + r"""
freed() { kill_passes "$user" ""; round=$((round + 1)); printf %s "air-freed-$round" > /proc/$$/comm; }
printf %s "air-freed-$round" > /proc/$$/comm
trap freed USR1
end=$((SECONDS + ttl))
while (( SECONDS < end )); do
  sleep $((end - SECONDS)) & sleeper=$!
  while kill -0 "$sleeper"; do wait "$sleeper"; done
done
"""
)


def keep_alive_argv(ttl_s: int, user: str) -> list[str]:
    """The container's command: hold it up for ``ttl_s`` and kill every process of ``user`` on SIGUSR1."""
    return ["bash", "-c", _KEEP_ALIVE, "air-keep-alive", str(ttl_s), user]


def freed_rounds(top: dict, init_pid: int) -> int | None:
    """How many kills the keep-alive has finished, from the engine's ``top`` with ``TOP_ARGS`` and the init's pid on
    the host (``State.Pid``); None when no keep-alive shows (an image without bash, a container made otherwise)."""
    rows = [dict(zip(top.get("Titles") or [], row, strict=False)) for row in top.get("Processes") or []]
    inits = [row for row in rows if row.get("PID") == str(init_pid)]
    if len(inits) != 1:
        return None
    (init,) = inits
    for row in rows:
        name = str(row.get("COMMAND") or "")
        ours = row.get("PPID") == init.get("PID") and row.get("UID") == init.get("UID")
        if ours and name.startswith(FREED_NAME) and name[len(FREED_NAME) :].isdigit():
            return int(name[len(FREED_NAME) :])
    return None


def free_the_agents_pids(container: Container, round_: int) -> bool:
    """Every process of the agent killed by the keep-alive, its ``round_``-th kill (blocking: signalled through the
    engine, then waited for, ``FREE_WAIT_S`` at most); False when the container has no keep-alive to ask. Raises the
    engine's errors. The round is the caller's count: the engine's ``top`` takes seconds while a bomb runs, so it is
    read only once the signal has gone."""
    container.reload()
    command = (container.attrs.get("Config") or {}).get("Cmd") or []
    if command[:4] != keep_alive_argv(0, "")[:4]:
        return False
    init_pid = int((container.attrs.get("State") or {}).get("Pid") or 0)
    container.kill(signal="SIGUSR1")
    deadline = time.monotonic() + FREE_WAIT_S
    while True:
        done = freed_rounds(container.top(ps_args=TOP_ARGS), init_pid)
        if done is None:
            return False
        if done >= round_ or time.monotonic() > deadline:
            return True
        time.sleep(0.1)
