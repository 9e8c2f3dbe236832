"""What GPUs this machine has, who holds their memory, and whether a training layout fits.

Users were burned by stale GPU processes holding memory: vLLM and FSDP then die minutes into a run
with an out-of-memory error. ``air check`` therefore compares the config's GPU layout against the
machine before anything starts.

- ``query_gpus`` reads nvidia-smi's machine-readable CSV queries (the stable, documented interface
  that ships with the driver) and names each process's user and command via psutil.
- ``check_layout`` turns a layout plus that inventory into pass / warn / fail findings with a fix.
- ``check_gpus`` does both, so the CLI needs one call.

Nothing here ever kills or signals another process: it only reports who holds what.
"""

from __future__ import annotations

import csv
import logging
import os
import shutil
import signal
import subprocess
from collections import Counter
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Literal

import psutil

log = logging.getLogger(__name__)

GPU_FIELDS = "index,uuid,name,memory.total,memory.used,driver_version"
APP_FIELDS = "gpu_uuid,pid,used_memory"
NO_DRIVER = "no NVIDIA driver/GPU on this machine"
# nvidia-smi writes these where a value is unknown (containers, WDDM, MIG, old boards).
_UNKNOWN = {"[n/a]", "n/a", "[not supported]", "[insufficient permissions]", "[unknown error]"}
_MIB_PER_GIB = 1024
_COMMAND_CHARS = 60


class GpuQueryError(Exception):
    """nvidia-smi is installed but failed, hung, or printed something we cannot read."""


@dataclass(frozen=True)
class Gpu:
    index: int
    uuid: str
    name: str
    memory_total_mib: int
    memory_used_mib: int

    @property
    def memory_free_mib(self) -> int:
        return max(self.memory_total_mib - self.memory_used_mib, 0)


@dataclass(frozen=True)
class GpuProcess:
    gpu_index: int
    pid: int
    used_memory_mib: int | None
    user: str | None
    command: str | None


@dataclass(frozen=True)
class GpuInventory:
    gpus: list[Gpu]
    processes: list[GpuProcess]
    driver_version: str | None = None

    def processes_on(self, index: int) -> list[GpuProcess]:
        return [p for p in self.processes if p.gpu_index == index]

    def gpu(self, index: int) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)


@dataclass(frozen=True)
class GpuRole:
    """A part of the run and the GPU indices it was given, e.g. ``GpuRole("trainer", (2, 3))``.

    Roles named ``env`` or ``env <name>`` are environment containers, which can share a card; every
    other role (inference, trainer, teacher) needs its cards to itself. ``config_key`` names the
    config key that sets ``gpu_ids``, so a fix can point at it.
    """

    name: str
    gpu_ids: tuple[int, ...]
    config_key: str = ""

    @property
    def needs_whole_card(self) -> bool:
        return self.name.split(" ", 1)[0] != "env"


@dataclass(frozen=True)
class LayoutFinding:
    status: Literal["pass", "warn", "fail"]
    message: str
    fix: str = ""


# --- reading nvidia-smi -------------------------------------------------------------------------


def query_gpus(nvidia_smi: str | None = None, timeout: float = 10.0) -> GpuInventory | None:
    """The GPUs and their compute processes, or None when nvidia-smi is not installed.

    ``nvidia_smi`` is a path or a name looked up on PATH; ``timeout`` applies to each of the two
    queries. Raises GpuQueryError, with nvidia-smi's own words, when it fails or hangs.
    """
    exe = shutil.which(nvidia_smi or "nvidia-smi")
    if exe is None:
        return None
    gpu_rows = _csv_rows(_run(exe, f"--query-gpu={GPU_FIELDS}", timeout))
    gpus = [_parse_gpu(row) for row in gpu_rows]
    drivers = sorted({row[5] for row in gpu_rows if len(row) > 5 and not _is_unknown(row[5])})
    index_by_uuid = {g.uuid: g.index for g in gpus}
    processes = []
    for row in _csv_rows(_run(exe, f"--query-compute-apps={APP_FIELDS}", timeout)):
        process = _parse_process(row, index_by_uuid)
        if process is not None:
            processes.append(process)
    return GpuInventory(gpus=gpus, processes=processes, driver_version=", ".join(drivers) or None)


def _run(exe: str, query: str, timeout: float) -> str:
    argv = [exe, query, "--format=csv,noheader,nounits"]
    shown = " ".join(argv)
    try:
        # Own session, so a hung nvidia-smi and anything it started can be killed as one group.
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    except OSError as exc:
        raise GpuQueryError(f"could not run `{shown}`: {exc}") from exc
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_own_child(proc)
        raise GpuQueryError(
            f"`{shown}` did not answer within {timeout:g} s; the driver may be hung (check `dmesg`)"
        ) from None
    if proc.returncode != 0:
        # nvidia-smi prints "NVIDIA-SMI has failed because ..." on stdout, other errors on stderr.
        said = " ".join(part.strip() for part in (err, out) if part.strip()) or "no output"
        raise GpuQueryError(f"`{shown}` exited with {proc.returncode}: {said}")
    return out


def _kill_own_child(proc: subprocess.Popen[str]) -> None:
    """Stop the nvidia-smi this module started; a process stuck in the driver may not die, so don't wait long."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.communicate(timeout=2)
    except subprocess.TimeoutExpired:
        log.warning("nvidia-smi (pid %d) did not exit after SIGKILL; leaving it", proc.pid)


def _csv_rows(text: str) -> list[list[str]]:
    rows = csv.reader(text.splitlines(), skipinitialspace=True)
    return [[cell.strip() for cell in row] for row in rows if row and any(cell.strip() for cell in row)]


def _is_unknown(value: str) -> bool:
    return value.strip().lower() in _UNKNOWN


def _parse_gpu(row: list[str]) -> Gpu:
    try:
        index, uuid, name, total, used = row[:5]
        return Gpu(index=int(index), uuid=uuid, name=name, memory_total_mib=int(total), memory_used_mib=int(used))
    except ValueError as exc:
        raise GpuQueryError(f"unreadable line from nvidia-smi --query-gpu={GPU_FIELDS}: {', '.join(row)!r}") from exc


def _parse_process(row: list[str], index_by_uuid: dict[str, int]) -> GpuProcess | None:
    try:
        uuid, pid_text, memory = row[:3]
        pid = int(pid_text)
        used = None if _is_unknown(memory) else int(memory)
    except ValueError as exc:
        raise GpuQueryError(
            f"unreadable line from nvidia-smi --query-compute-apps={APP_FIELDS}: {', '.join(row)!r}"
        ) from exc
    if uuid not in index_by_uuid:
        log.warning("nvidia-smi lists pid %d on %s, which is not among its GPUs; ignoring it", pid, uuid)
        return None
    user, command = _owner(pid)
    return GpuProcess(gpu_index=index_by_uuid[uuid], pid=pid, used_memory_mib=used, user=user, command=command)


def _owner(pid: int) -> tuple[str | None, str | None]:
    """User and command line of ``pid``; None where it is gone, in another PID namespace, or hidden from us."""
    try:
        process = psutil.Process(pid)
    except psutil.Error:
        return None, None
    with process.oneshot():
        return _ask(process.username), _ask(lambda: _command_line(process))


def _ask(getter: Callable[[], str]) -> str | None:
    try:
        return getter() or None
    except psutil.Error:
        return None


def _command_line(process: psutil.Process) -> str:
    argv = process.cmdline()
    if not argv:
        return process.name()
    return " ".join([os.path.basename(argv[0]), *argv[1:]])


# --- comparing a layout with the machine --------------------------------------------------------


def check_layout(
    roles: Sequence[GpuRole],
    inventory: GpuInventory,
    *,
    min_free_fraction: float = 0.9,
    own_pids: Collection[int] = (),
) -> list[LayoutFinding]:
    """Findings for each role: its GPUs exist and are free enough; who holds memory if not.

    ``own_pids`` are processes air recorded for an earlier run (``air clean`` can stop them). Roles
    that need whole cards fail on a busy GPU; env roles only warn. Overlaps between roles are not
    checked here (the config check does that).
    """
    if not 0.0 <= min_free_fraction <= 1.0:
        raise ValueError(f"min_free_fraction must be between 0 and 1, got {min_free_fraction}")
    me = _current_user()
    findings: list[LayoutFinding] = []
    for role in roles:
        role_findings: list[LayoutFinding] = []
        for index in role.gpu_ids:
            gpu = inventory.gpu(index)
            if gpu is None:
                role_findings.append(_missing(role, index, inventory))
                continue
            holders = inventory.processes_on(index)
            if holders or gpu.memory_free_mib < min_free_fraction * gpu.memory_total_mib:
                role_findings.append(_busy(role, gpu, holders, set(own_pids), me))
        findings.extend(role_findings or _free(role, inventory))
    return findings


def _missing(role: GpuRole, index: int, inventory: GpuInventory) -> LayoutFinding:
    indices = [g.index for g in inventory.gpus]
    present = f"GPU{'s' if len(indices) > 1 else ''} {_ranges(indices)}" if indices else "no GPUs"
    key = role.config_key or "the role's GPU ids (e.g. trainer_gpu_ids / env_gpu)"
    return LayoutFinding(
        "fail",
        f"{role.name} wants GPU {index} but this machine has {present}",
        f"edit {key} in the config to use GPUs that exist",
    )


def _busy(role: GpuRole, gpu: Gpu, holders: list[GpuProcess], own_pids: set[int], me: str | None) -> LayoutFinding:
    used = f"{_gib(gpu.memory_used_mib)} of {_gib(gpu.memory_total_mib)} GiB used"
    if holders:
        who = "; ".join(_describe_holder(p, own_pids) for p in holders)
        fixes = dict.fromkeys(_holder_fix(p, own_pids, me) for p in holders)  # ordered, no repeats
    else:
        who = "no process visible to nvidia-smi (another container or PID namespace?)"
        fixes = {"look for the holder with `nvidia-smi` on the host; air never kills other users' processes": None}
    need = "needs the whole card" if role.needs_whole_card else "can share, but may run short of memory"
    return LayoutFinding(
        "fail" if role.needs_whole_card else "warn",
        f"{role.name} ({need}): GPU {gpu.index} ({_short_name(gpu.name)}): {used} by {who}",
        "; ".join(fixes),
    )


def _describe_holder(process: GpuProcess, own_pids: set[int]) -> str:
    user = process.user or "unknown user"
    command = _shorten(process.command) if process.command else "command unknown"
    memory = "" if process.used_memory_mib is None else f", {_gib(process.used_memory_mib)} GiB"
    text = f"pid {process.pid} ({user}: {command}{memory})"
    return f"{text} recorded by air (run `air clean` to stop it)" if process.pid in own_pids else text


def _holder_fix(process: GpuProcess, own_pids: set[int], me: str | None) -> str:
    if process.pid in own_pids:
        return "run `air clean` to stop the processes air recorded"
    if me is not None and process.user == me:
        return f"stop it yourself (kill {process.pid}) if it is yours and stale"
    return "ask its owner or wait; air never kills other users' processes"


def _free(role: GpuRole, inventory: GpuInventory) -> list[LayoutFinding]:
    gpus = [g for g in (inventory.gpu(i) for i in role.gpu_ids) if g is not None]
    if not gpus:
        return []  # a role without GPUs has nothing to check here
    if len(gpus) == 1:
        gpu = gpus[0]
        detail = f"GPU {gpu.index} free ({_gib(gpu.memory_free_mib)} of {_gib(gpu.memory_total_mib)} GiB)"
    else:
        tightest = min(gpus, key=lambda g: g.memory_free_mib)
        detail = (
            f"GPUs {_ranges([g.index for g in gpus])} free "
            f"(least free: {_gib(tightest.memory_free_mib)} of {_gib(tightest.memory_total_mib)} GiB)"
        )
    return [LayoutFinding("pass", f"{role.name}: {detail}")]


def check_gpus(
    roles: Sequence[GpuRole],
    *,
    min_free_fraction: float = 0.9,
    own_pids: Collection[int] = (),
    nvidia_smi: str | None = None,
    timeout: float = 10.0,
) -> list[LayoutFinding]:
    """Query this machine and check ``roles`` against it; a missing or broken driver is a failure finding."""
    try:
        inventory = query_gpus(nvidia_smi, timeout)
    except GpuQueryError as exc:
        return [LayoutFinding("fail", f"nvidia-smi failed: {exc}", "fix the NVIDIA driver (or reboot), then retry")]
    if inventory is None:
        return [LayoutFinding("fail", f"nvidia-smi not found: {NO_DRIVER}", "install the NVIDIA driver")]
    return check_layout(roles, inventory, min_free_fraction=min_free_fraction, own_pids=own_pids)


def describe_inventory(inventory: GpuInventory | None) -> str:
    """One line, e.g. ``4 × NVIDIA H100 80GB HBM3, driver 550.54.15``."""
    if inventory is None:
        return NO_DRIVER
    if not inventory.gpus:
        return "nvidia-smi lists no GPUs"
    counts = Counter(g.name for g in inventory.gpus)
    text = ", ".join(f"{n} × {name}" for name, n in counts.items())
    return f"{text}, driver {inventory.driver_version}" if inventory.driver_version else text


# --- small formatting helpers -------------------------------------------------------------------


def _gib(mib: int) -> str:
    return f"{mib / _MIB_PER_GIB:.1f}"


def _short_name(name: str) -> str:
    return name.removeprefix("NVIDIA ").strip() or name


def _shorten(command: str) -> str:
    return command if len(command) <= _COMMAND_CHARS else command[: _COMMAND_CHARS - 3].rstrip() + "..."


def _ranges(indices: Sequence[int]) -> str:
    """``[0, 1, 2, 3, 7]`` -> ``0-3, 7``."""
    parts: list[str] = []
    for index in sorted(set(indices)):
        if parts and index == _last(parts) + 1:
            parts[-1] = f"{parts[-1].split('-')[0]}-{index}"
        else:
            parts.append(str(index))
    return ", ".join(parts)


def _last(parts: list[str]) -> int:
    return int(parts[-1].split("-")[-1])


def _current_user() -> str | None:
    try:
        return psutil.Process().username()
    except psutil.Error:
        return None


__all__ = [
    "Gpu",
    "GpuInventory",
    "GpuProcess",
    "GpuQueryError",
    "GpuRole",
    "LayoutFinding",
    "check_gpus",
    "check_layout",
    "describe_inventory",
    "query_gpus",
]
