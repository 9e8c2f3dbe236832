"""The container's writable size watched against its disk limit, where the engine cannot size a container.

On overlay2 over ext4 (most hosts) no quota exists, so each check measures two ways and adds them up:

- A probe run as root in the container (``PROBE``, one exec of ``python3 -I``: ~0.1 s, most of it the exec)
  counts the entries (files, folders, links) under every folder the agent can write and charges each
  ``ENTRY_BYTES`` (4 KiB: an empty folder takes a block of the host's disk and an inode, which the engine counts
  as 0 bytes), and adds the files deleted but still open in the agent's processes (the ``/proc/PID/fd`` links
  ending in " (deleted)", sized by a stat of the link; read by a fork of the probe that drops to the agent's
  uid, as root without CAP_SYS_PTRACE cannot read them). The probe walks by the directory's path, never follows
  a link, stops at ``MAX_ENTRIES`` and at ``PROBE_BUDGET_S``.
- The engine's own size of the container's layer (an inspect with ``size=1``: it adds up the files of the
  container's own layer, root's included, as a quota would count them; 1 ms for a task's workspace, some
  5 us per file more), asked only when the probe found nothing wrong, with a timeout.

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
at the end of its output. Commands still run, so that the agent can delete files, but one that leaves the
container over its limit fails with the message (``Sandbox.run``), and the layer that evaluates asks
``Sandbox.over_disk_limit`` first. The sandbox and the rollout go on: it is the agent's failure, nothing else.

What it cannot see: what lands between two checks (near the limit they come every half second; a slow check
makes it up to ``disk_check_s`` plus the check's own time: a fast writer gets that far past it, each file no
further than ``max_file_size``), a deleted file kept only by a memory mapping (its fd closed), and the open
files of the evaluator's processes (``air-eval``, bounded by the evaluation's time). A sparse file counts at
its full length, as the engine counts it. Entries under root-owned folders the agent cannot write (root's
own copies) count only by their bytes, through the engine.
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
COST_FACTOR = 4  # a check waits up to this many times its own cost (never past disk_check_s): a probe is ~0.1 s
ENTRY_BYTES = 4096  # what each file, folder or link costs on top of its bytes: one block of the host's disk
MAX_ENTRIES = 200_000  # more entries than this is a problem: the probe stops counting (~2 s for 250k folders)
PROBE_BUDGET_S = 10.0  # the probe's walk stops here and says so (a problem); the inspect's timeout too
PATH_MAX = 4096

# Run as root: python3 -I -c PROBE <agent user> <MAX_ENTRIES> <budget s> <PATH_MAX> <enough>. Prints one JSON
# line. It stops counting at <enough> entries, which at ENTRY_BYTES each pass the limit on their own: a small limit
# is found passed by a folder bomb in a fraction of the walk (at 200m: 51,201 entries, not 200,000).
# Standard library only; follows no link (scandir's d_type, lstat); of what the agent wrote only folders are
# opened, to list them. The open-file reader is a fork that drops to the agent's uid and groups.
PROBE = r"""
import json, os, pwd, re, sys, time
user, cap, budget, path_max = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
enough = int(sys.argv[5])  # entries that alone pass the limit: counting further tells nothing more
deadline = time.monotonic() + budget
agent = pwd.getpwnam(user)
out = {"entries": 0, "deleted": 0, "problem": None}
mounts = {"/proc", "/sys", "/dev"}
with open("/proc/self/mountinfo") as f:
    for line in f:
        mounts.add(re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split()[4]))
mounts.discard("/")

def under_mount(path):
    return any(path == m or path.startswith(m + "/") for m in mounts)

def walk():
    stack = [("/", False)]  # (folder, whether its entries count: the agent can write it or one above it)
    while stack:
        path, counted = stack.pop()
        if len(path) >= path_max:
            return f"a path longer than {path_max} bytes ({path[:80]}...): delete it"
        try:
            it = os.scandir(path)
        except FileNotFoundError:
            continue
        except OSError as exc:
            return f"cannot list {path[:80]}...: {exc.strerror}"
        with it:
            for e in it:
                if e.path in mounts:
                    continue
                folder = e.is_dir(follow_symlinks=False)
                count = counted
                if not counted and folder:
                    try:
                        st = e.stat(follow_symlinks=False)
                    except FileNotFoundError:
                        continue
                    count = st.st_uid != 0 or bool(st.st_mode & 0o022)
                if count:
                    out["entries"] += 1
                    if out["entries"] > cap:
                        return f"more than {cap:,} files and folders: delete some"
                    if out["entries"] >= enough:
                        return None
                if folder:
                    stack.append((e.path, count))
        if time.monotonic() > deadline:
            return f"counting its files took over {budget:g} s: delete some"

def deleted():  # as the agent: root without CAP_SYS_PTRACE cannot read another uid's /proc/PID/fd
    total, seen = 0, set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/status", "rb") as f:  # bytes: a name need not be UTF-8
                uids = next(line for line in f if line.startswith(b"Uid:")).split()[1:]
            fds = os.listdir(f"/proc/{pid}/fd") if str(agent.pw_uid).encode() in uids else []
        except (FileNotFoundError, ProcessLookupError, StopIteration):
            continue
        except PermissionError:
            return 0, f"process {pid} of the agent hides its open files: end it"
        for fd in fds:
            link = f"/proc/{pid}/fd/{fd}"
            try:
                target = os.readlink(link)
                if not target.endswith(" (deleted)") or not target.startswith("/") or under_mount(target[:-10]):
                    continue
                st = os.stat(link)
            except (FileNotFoundError, ProcessLookupError):
                continue
            except PermissionError:
                return 0, f"process {pid} of the agent hides its open files: end it"
            if st.st_nlink == 0 and (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_size
            if time.monotonic() > deadline:
                return total, f"reading its processes' open files took over {budget:g} s"
    return total, None

out["problem"] = walk()
if out["problem"] is None:
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(agent.pw_gid)
            os.setuid(agent.pw_uid)
            os.write(w, json.dumps(deleted()).encode())
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r) as f:
        text = f.read()
    os.waitpid(pid, 0)
    out["deleted"], out["problem"] = json.loads(text) if text else (0, "the open-file reader failed")
print(json.dumps(out))
"""


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
        return max(soon, min(COST_FACTOR * self.cost_s, self._config.disk_check_s))

    def _measure(self) -> Measure:
        entries, deleted, problem = self._probe()
        if problem is not None:
            return Measure(None, problem)
        size = self._engine_size()
        if isinstance(size, str):
            return Measure(None, size)
        return Measure(size + entries * ENTRY_BYTES + deleted)

    def _probe(self) -> tuple[int, int, str | None]:
        """(entries, bytes deleted but open, problem) from ``PROBE`` run as root in the container."""
        argv = ["timeout", "-s", "KILL", str(int(PROBE_BUDGET_S) + 10), "python3", "-I", "-c", PROBE]
        enough = min(MAX_ENTRIES, self.limit // ENTRY_BYTES + 1) if self.limit else MAX_ENTRIES
        argv += [self._config.user, str(MAX_ENTRIES), str(PROBE_BUDGET_S), str(PATH_MAX), str(enough)]
        try:
            code, output = self._container.exec_run(argv, user="root", workdir="/")
        except docker.errors.NotFound as exc:
            raise ContainerStopped(f"container {self._container.short_id} no longer exists") from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:  # "is not running"
                raise ContainerStopped(f"container {self._container.short_id} no longer runs") from exc
            raise
        text = output.decode(errors="replace").strip()
        try:
            found = json.loads(text.splitlines()[-1])
            return int(found["entries"]), int(found["deleted"]), found["problem"]
        except (ValueError, IndexError, KeyError, TypeError):
            return 0, 0, f"its files could not be counted (exit {code}: {text[-200:]!r})"

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

    async def _stop_writers(self) -> None:
        argv = kill_agent_argv(spare_pid=self._shell.pid or 0)  # every process of the agent but its shell
        try:
            await asyncio.to_thread(self._container.exec_run, argv, user=self._config.user, workdir="/")
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
