"""What a start of an env node leaves on its host for the next start of that node: the processes it started.

A node killed alone (SIGKILL to ``air fleet node DIR``, an OOM kill) leaves its env server running, reparented
to init: Slurm's proctrack/linuxproc follows the process tree, so the orphan escapes the step's end too, and
keeps making containers under the node's label. So each start writes, in its private folder (host-local,
this user's only), its own pid and its env server's, each with its start time; the next start of the node
on this host reads that before anything else is removed and ends every recorded process still alive with
the same start time (a reused pid is left alone), with what they started: SIGTERM, a short grace, SIGKILL.
Only then are the old containers and the folder removed (air.fleet.node).
"""

from __future__ import annotations

import logging
import os
import socket
import stat
from pathlib import Path

import psutil
from pydantic import BaseModel, ValidationError

from air.fleet.folder import write_private
from air.launch.process_control import same_process, self_and_ancestors, stop_processes

log = logging.getLogger(__name__)
RECORD_NAME = "processes.json"
# The previous start had its own 30 s for its env server; here it is only told to go, not waited on as long.
GRACE_S = 10.0


class RecordedProcess(BaseModel):
    pid: int
    create_time: float  # psutil's, from /proc: a pid alive with another start time is another process


class StartRecord(BaseModel):
    uid: int
    host: str
    processes: dict[str, RecordedProcess]  # what it is ("env server") -> which process


def record_start(private: Path, processes: dict[str, int]) -> None:
    """Write what this start runs (``{"node process": pid, "env server": pid}``) where its next start looks."""
    found = {}
    for role, pid in processes.items():
        try:
            found[role] = RecordedProcess(pid=pid, create_time=psutil.Process(pid).create_time())
        except psutil.Error:  # already gone (an env server that failed at once): nothing to end later
            continue
    record = StartRecord(uid=os.getuid(), host=socket.gethostname(), processes=found)
    write_private(private / RECORD_NAME, record.model_dump_json())


def read_record(private: Path) -> StartRecord | None:
    """The previous start's record, or None when there is none or it is not one to act on (said in the log)."""
    path = private / RECORD_NAME
    try:
        info = os.lstat(path)
        text = path.read_text()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.warning("ignored %s, the previous start's process record: unreadable (%s)", path, exc)
        return None
    if not stat.S_ISREG(info.st_mode) or info.st_uid != os.getuid():
        log.warning("ignored %s, the previous start's process record: not a file of this user's", path)
        return None
    try:
        record = StartRecord.model_validate_json(text)
    except ValidationError as exc:
        log.warning("ignored %s, the previous start's process record: malformed (%s)", path, exc.errors()[0]["msg"])
        return None
    if record.uid != os.getuid() or record.host != socket.gethostname():
        log.warning(
            "ignored %s: it records processes of user %d on %s, not this user's on this host",
            path,
            record.uid,
            record.host,
        )
        return None
    return record


def end_previous_start(private: Path, grace_s: float = GRACE_S) -> list[str]:
    """End every process the previous start of this node recorded in ``private`` that still runs, and what
    they started; returns what was ended, as the log line says it ("env server (pid 12)")."""
    record = read_record(private)
    if record is None:
        return []
    mine = self_and_ancestors()
    roles: dict[int, str] = {}
    targets: dict[int, psutil.Process] = {}
    for role, recorded in record.processes.items():
        process = same_process(recorded.pid, recorded.create_time, record.uid)
        if process is None or process.pid in mine:
            continue
        roles[process.pid] = role
        targets[process.pid] = process
        try:
            descendants = process.children(recursive=True)
        except psutil.Error:
            descendants = []
        for child in descendants:
            if child.pid not in mine:
                targets.setdefault(child.pid, child)
                roles.setdefault(child.pid, f"process started by its {role}")
    if not targets:
        return []
    outcomes = stop_processes(targets.values(), grace=grace_s)
    ended = [f"{roles[o.pid]} (pid {o.pid})" for o in outcomes if not o.outcome.startswith("failed")]
    failed = [f"{roles[o.pid]} (pid {o.pid}): {o.outcome}" for o in outcomes if o.outcome.startswith("failed")]
    if ended:
        log.info("ended the previous start's %s", _and(ended))
    if failed:
        log.warning("could not end the previous start's %s", _and(failed))
    return ended


def _and(parts: list[str]) -> str:
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]
