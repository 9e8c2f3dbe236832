"""The plan behind ``air clean``: what we left behind, and stopping exactly that.

Two kinds of leftovers, and nothing else is ever touched (no killing by process name):
- sandbox containers carrying our labels on this host (``air.sandbox.container``), whose owning process died;
- processes of trees ``air.launch.launcher`` recorded (``air.launch.process_records``), whose root has exited.
Leftovers of runs still going are listed in ``skipped_running`` unless ``include_running``.
``plan_clean`` only looks; ``execute_clean`` acts on a plan (the CLI shows it and asks first).
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field
from pathlib import Path

import docker.errors
import psutil

from air.launch.process_control import (
    describe,
    live_processes,
    root_alive,
    same_process,
    self_and_ancestors,
    stop_processes,
)
from air.launch.process_records import ProcessRecord, StopOutcome, forget, load_records
from air.sandbox.config import LABEL, LABEL_HOST, LABEL_PID, LABEL_RUN
from air.sandbox.container import destroy_container, docker_client
from air.sandbox.errors import SandboxError
from air.sandbox.removal import owner_alive


@dataclass
class ContainerItem:
    id: str
    name: str
    status: str
    run_id: str
    owner_pid: int | None
    owner_alive: bool


@dataclass
class ProcessItem:
    run_id: str
    pid: int
    command: str
    root_alive: bool
    create_time: float  # with pid, the identity re-checked before signalling


@dataclass
class CleanPlan:
    containers: list[ContainerItem]
    processes: list[ProcessItem]
    skipped_running: list[str]
    unreadable_records: list[tuple[Path, str]]
    docker_error: str | None
    # Records execute_clean deletes once nothing of them is alive (including ones already dead now).
    records: list[ProcessRecord] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        """Nothing to stop or remove (stale records may still be tidied)."""
        return not self.containers and not self.processes


@dataclass
class CleanReport:
    containers: list[tuple[ContainerItem, str]]  # item, "removed" | "failed: <reason>"
    processes: list[StopOutcome]
    forgotten_records: list[str]  # run ids whose record file was deleted


def _int_or_none(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _owned_by_us(pid: int | None) -> bool:
    """Is the (live) owner a process of the current user? Another user's containers are never ours to stop."""
    try:
        return pid is not None and psutil.Process(pid).uids().real == os.getuid()
    except psutil.Error:
        return False


def _plan_containers(include_running: bool) -> tuple[list[ContainerItem], list[str], str | None]:
    try:
        filters = {"label": [f"{LABEL}=1", f"{LABEL_HOST}={socket.gethostname()}"]}
        found = docker_client().containers.list(all=True, filters=filters, ignore_removed=True)
    except (SandboxError, docker.errors.DockerException) as exc:
        return [], [], f"cannot list sandbox containers: {exc}"
    protected = self_and_ancestors()
    planned: list[ContainerItem] = []
    skipped: dict[int | None, list[ContainerItem]] = {}
    for container in found:
        labels = container.labels
        item = ContainerItem(
            id=container.id,
            name=container.name,
            status=container.status,
            run_id=labels.get(LABEL_RUN, "?"),
            owner_pid=_int_or_none(labels.get(LABEL_PID)),
            owner_alive=owner_alive(labels),
        )
        keep = item.owner_alive and (
            not include_running or item.owner_pid in protected or not _owned_by_us(item.owner_pid)
        )
        if keep:
            skipped.setdefault(item.owner_pid, []).append(item)
        else:
            planned.append(item)
    notes = []
    for pid, items in skipped.items():
        runs = ", ".join(sorted({i.run_id for i in items}))
        whose = "" if _owned_by_us(pid) else ", another user's"
        notes.append(f"{len(items)} containers of live process {pid} (run {runs}{whose})")
    return planned, notes, None


def plan_clean(include_running: bool = False, state_dir: Path | str | None = None) -> CleanPlan:
    """What ``air clean`` would stop or remove; changes nothing."""
    containers, skipped, docker_error = _plan_containers(include_running)
    records, unreadable = load_records(state_dir)
    processes: list[ProcessItem] = []
    tidy: list[ProcessRecord] = []
    for record in records:
        live = live_processes(record)
        running = root_alive(record)
        if running and not include_running:
            skipped.append(
                f"run {record.run_id}: {record.kind} (pid {record.root_pid}) is still running, "
                f"{len(live)} processes in its tree"
            )
            continue
        tidy.append(record)
        for proc in live:
            try:
                create_time = proc.create_time()
            except psutil.Error:
                continue  # died while we looked
            processes.append(
                ProcessItem(
                    run_id=record.run_id,
                    pid=proc.pid,
                    command=describe(proc),
                    root_alive=running,
                    create_time=create_time,
                )
            )
    return CleanPlan(
        containers=containers,
        processes=processes,
        skipped_running=skipped,
        unreadable_records=unreadable,
        docker_error=docker_error,
        records=tidy,
    )


def execute_clean(plan: CleanPlan, grace: float = 10.0) -> CleanReport:
    """Remove the plan's containers, stop its processes (SIGTERM, then SIGKILL after ``grace``), tidy records."""
    container_outcomes: list[tuple[ContainerItem, str]] = []
    for item in plan.containers:
        try:
            destroy_container(item.id)
            container_outcomes.append((item, "removed"))
        except (SandboxError, docker.errors.DockerException) as exc:
            container_outcomes.append((item, f"failed: {exc}"))

    gone: list[StopOutcome] = []
    procs: list[psutil.Process] = []
    for item in plan.processes:
        proc = same_process(item.pid, item.create_time, os.getuid())  # the pid may have been reused since
        if proc is None:
            gone.append(StopOutcome(pid=item.pid, command=item.command, outcome="already gone"))
        else:
            procs.append(proc)
    outcomes = gone + stop_processes(procs, grace=grace)

    forgotten = []
    for record in plan.records:
        if not live_processes(record):
            forget(record)
            forgotten.append(record.run_id)
    return CleanReport(containers=container_outcomes, processes=outcomes, forgotten_records=forgotten)
