"""Telling whether a recorded process is still the one we started, and stopping exactly those."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterable

import psutil

from air.launch.process_records import ProcessEntry, ProcessRecord, StopOutcome, now_iso, save

# create_time comes from /proc with clock-tick resolution and boot-time drift: match within 1 s.
CREATE_TIME_TOLERANCE_S = 1.0
# After SIGKILL a process is gone within milliseconds unless stuck in the kernel (e.g. a GPU driver).
KILL_WAIT_S = 5.0


def self_and_ancestors() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(parent.pid for parent in me.parents())}


def same_process(pid: int, create_time: float, uid: int) -> psutil.Process | None:
    """The live, non-zombie process ``pid`` if it is still the one created at ``create_time`` by ``uid``."""
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) >= CREATE_TIME_TOLERANCE_S:
            return None  # the pid was reused
        if proc.uids().real != uid or proc.status() == psutil.STATUS_ZOMBIE:
            return None
        return proc
    except psutil.Error:
        return None


def root_alive(record: ProcessRecord) -> bool:
    """Is the recorded root process still running (same pid and start time)?"""
    return same_process(record.root_pid, record.root_create_time, record.uid) is not None


def _session_still_ours(record: ProcessRecord) -> bool:
    """May the session id be scanned? Only if the root led it and no newer process has taken the id.

    Linux never hands out a pid that is still some live process's session id, so if a process with
    that pid exists and is not our root, the old session is empty and the id now names someone else's.
    """
    if record.session_id != record.root_pid:
        return False  # the root joined an existing session (e.g. the user's shell): never scan that
    try:
        leader = psutil.Process(record.session_id)
    except psutil.NoSuchProcess:
        return True  # leader gone; members (if any) keep the id reserved
    except psutil.Error:
        return False
    try:
        return abs(leader.create_time() - record.root_create_time) < CREATE_TIME_TOLERANCE_S
    except psutil.Error:
        return False


def _session_members(record: ProcessRecord, exclude: set[int]) -> list[psutil.Process]:
    """Live processes of the record's user in its session, created at/after the root."""
    if not _session_still_ours(record):
        return []
    found = []
    for proc in psutil.process_iter(["uids", "create_time", "status"]):
        info = proc.info
        if proc.pid in exclude or info["uids"] is None or info["create_time"] is None:
            continue
        if info["uids"].real != record.uid or info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if info["create_time"] < record.root_create_time - CREATE_TIME_TOLERANCE_S:
            continue
        try:
            if os.getsid(proc.pid) == record.session_id:
                found.append(proc)
        except OSError:
            continue
    return found


def _entry(proc: psutil.Process) -> ProcessEntry | None:
    try:
        with proc.oneshot():
            return ProcessEntry(
                pid=proc.pid, create_time=proc.create_time(), cmdline=proc.cmdline(), first_seen=now_iso()
            )
    except psutil.Error:
        return None


def snapshot(record: ProcessRecord) -> ProcessRecord:
    """Add the root's live descendants and live same-session processes to ``members``; write the record.

    Members that have died are dropped, so a long run's record stays small.
    """
    exclude = self_and_ancestors() | {record.root_pid}
    seen: list[psutil.Process] = []
    root = same_process(record.root_pid, record.root_create_time, record.uid)
    if root is not None:
        try:
            seen.extend(root.children(recursive=True))
        except psutil.Error:
            pass
    seen.extend(_session_members(record, exclude))

    kept = [m for m in record.members if same_process(m.pid, m.create_time, record.uid) is not None]
    known = {m.pid for m in kept}  # all live: two live processes never share a pid
    for proc in seen:
        if proc.pid in exclude:
            continue
        try:
            if proc.uids().real != record.uid:
                continue
        except psutil.Error:
            continue
        entry = _entry(proc) if proc.pid not in known else None
        if entry is not None:
            kept.append(entry)
            known.add(entry.pid)
    record.members = kept
    save(record)
    return record


def live_processes(record: ProcessRecord) -> list[psutil.Process]:
    """The record's processes still alive and provably ours (pid + create_time + our uid), root first."""
    if record.uid != os.getuid():
        return []  # another user's record: never touch their processes
    exclude = self_and_ancestors()
    found: dict[int, psutil.Process] = {}
    candidates = [(record.root_pid, record.root_create_time)] + [(m.pid, m.create_time) for m in record.members]
    for pid, create_time in candidates:
        proc = same_process(pid, create_time, record.uid)
        if proc is not None and pid not in exclude:
            found.setdefault(pid, proc)
    for proc in _session_members(record, exclude):
        found.setdefault(proc.pid, proc)
    return list(found.values())


def describe(proc: psutil.Process, width: int = 80) -> str:
    """A short command line for messages: ``python -m vllm...``."""
    try:
        text = " ".join(proc.cmdline()) or proc.name()
    except psutil.Error:
        return "?"
    return text if len(text) <= width else text[: width - 3] + "..."


def _is_zombie(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False


def _wait_gone(
    procs: list[psutil.Process], timeout: float, hurry: threading.Event | None
) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """psutil.wait_procs in short slices, so a second Ctrl-C (``hurry``) can cut the grace period."""
    deadline = time.monotonic() + timeout
    gone: list[psutil.Process] = []
    alive = list(procs)
    while alive:
        left = deadline - time.monotonic()
        if left <= 0 or (hurry is not None and hurry.is_set()):
            break
        newly_gone, alive = psutil.wait_procs(alive, timeout=min(0.2, left))
        gone.extend(newly_gone)
        # A zombie is dead, only not yet reaped by its (new) parent, e.g. a slow init: count it gone.
        zombies = [proc for proc in alive if _is_zombie(proc)]
        gone.extend(zombies)
        alive = [proc for proc in alive if proc not in zombies]
    return gone, alive


def stop_processes(
    procs: Iterable[psutil.Process], grace: float = 10.0, hurry: threading.Event | None = None
) -> list[StopOutcome]:
    """SIGTERM all, wait up to ``grace`` s (less once ``hurry`` is set), SIGKILL the rest.

    psutil re-checks each process's identity (create_time) right before signalling, so a pid that
    was reused meanwhile is reported "already gone" and left alone.
    """
    procs = list(procs)
    outcomes: dict[int, StopOutcome] = {}
    commands = {proc.pid: describe(proc) for proc in procs}

    def note(proc: psutil.Process, outcome: str) -> None:
        outcomes[proc.pid] = StopOutcome(pid=proc.pid, command=commands[proc.pid], outcome=outcome)

    terminated: list[psutil.Process] = []
    for proc in procs:
        try:
            if not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE:
                note(proc, "already gone")
                continue
            proc.terminate()
            terminated.append(proc)
        except psutil.NoSuchProcess:
            note(proc, "already gone")
        except psutil.AccessDenied:
            note(proc, "failed: permission denied")
        except psutil.Error as exc:
            note(proc, f"failed: {exc}")

    gone, stubborn = _wait_gone(terminated, grace, hurry)
    for proc in gone:
        note(proc, "terminated")

    killed: list[psutil.Process] = []
    for proc in stubborn:
        try:
            proc.kill()
            killed.append(proc)
        except psutil.NoSuchProcess:
            note(proc, "terminated")  # exited between the wait and the kill
        except psutil.Error as exc:
            note(proc, f"failed: SIGKILL refused ({exc})")
    gone, alive = _wait_gone(killed, KILL_WAIT_S, None)
    for proc in gone:
        note(proc, "killed")
    for proc in alive:
        note(proc, f"failed: still alive {KILL_WAIT_S:.0f} s after SIGKILL")
    return [outcomes[proc.pid] for proc in procs if proc.pid in outcomes]
