"""What a container may write: a disk quota where the engine can size containers, a watch where it cannot,
a per-file limit and sized /tmp, /dev/shm everywhere (bytes and files).

The quota is the engine's own storage option (``storage_opt={"size": ...}``): the kernel answers a write
past it with "No space left on device" inside the container, so an agent's runaway file fails there
instead of filling the host's disk. Only some storage drivers can size a container: btrfs (with full
quotas its size counts the image's files too; with the simple quotas scripts/engine_quota.sh turns on, not),
zfs, and overlay2 on xfs mounted with ``pquota``. The engine's info says
"overlay2" on "xfs" but not whether project quotas are on: an engine on xfs is asked once (a container
created with the option, then removed) and one that refuses counts as "overlay2 on xfs without pquota".
On any other, overlay2 on ext4 being most hosts' default, the engine refuses the option, so none is
passed: the container's writable layer gets a file system of its own of the limit's size (``disk_image``: a
loop-mounted sparse ext4 image; the kernel keeps the limit) where this process is root on the engine's host with
loop devices, and only where it is not (``disk_layer``) ``disk_watch`` checks the container's writable size
against the limit instead (it cannot see a file held only by a descriptor in flight or a mapping). A run says so:
one short warning the first time an engine is used (remembered per engine ID across processes, in the
user's cache), the whole story at INFO (a run's ``run.log``) every time. On every engine the agent's shell
caps each file it and its programs write
(``max_file_size``, see ``protocol.shell_argv``), and /tmp and /dev/shm are tmpfs mounts of their own size and
number of files (``tmpfs_options``).

No sized volume stands in where the driver cannot size: the only volume an ext4 host's engine sizes is a
tmpfs, which would charge the workspace's files (datasets, checkpoints) to the container's memory limit; a volume
on a loop device would bound only where it is mounted, while the agent owns /home/agent (MLGym's conda env) and
more: ``disk_image`` bounds the whole writable layer.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import weakref
from pathlib import Path
from typing import Any

import docker

from air.sandbox.config import SIZE_UNITS, SandboxConfig, size_bytes, tmpfs_inodes
from air.sandbox.engine import DOCKER_ERRORS

log = logging.getLogger(__name__)

_SIZING_DRIVERS = ("btrfs", "zfs")  # size any container; overlay2 only on xfs (with pquota, which info hides)
# client -> "overlay2 on extfs", ...: asked once per client (a new engine, or the engine back from a restart,
# gets a new client; every unix socket's base_url is the same "http+docker://localhost").
_drivers: weakref.WeakKeyDictionary[docker.DockerClient, str] = weakref.WeakKeyDictionary()
_asking = threading.Lock()  # the pool starts many containers at once: one question, one warning

# The one-line step: the engine's data root on xfs with pquota, or on btrfs where this kernel's xfs has no quotas.
QUOTA_STEP = "sudo bash scripts/engine_quota.sh 200G"
HOW_TO_GET_ONE = (
    f"`{QUOTA_STEP}` moves the engine's data root onto a file that sizes containers: xfs with project quotas, or "
    "btrfs with simple quotas where this kernel's xfs has none (or run dockerd on such a file system yourself), or "
    "set the disk limit to '' to go without"
)
NO_PQUOTA = "overlay2 on xfs without pquota"


def storage_driver(client: docker.DockerClient) -> str:
    """The engine's storage driver and, for overlay2, its backing filesystem: "overlay2 on xfs"."""
    with _asking:
        if client not in _drivers:
            info = client.info()
            driver = str(info.get("Driver", "?"))
            backing = dict(info.get("DriverStatus") or []).get("Backing Filesystem")
            _drivers[client] = f"{driver} on {backing}" if backing else driver
            if _drivers[client] == "overlay2 on xfs" and _quota_refused(client):
                _drivers[client] = NO_PQUOTA
            if not can_size(_drivers[client]):
                _say_no_quota(_drivers[client], str(info.get("ID") or ""))
        return _drivers[client]


def _quota_refused(client: docker.DockerClient) -> bool:
    """Whether an engine on xfs refuses a container's size (its xfs is mounted without pquota): one container
    created from any image it holds, with the option, then removed (~0.1 s, once per engine). False when it cannot
    tell (no image yet, another error): the sandbox's own create then says what went wrong."""
    try:
        images = client.images.list()
        if not images:
            return False
        config = client.api.create_host_config(storage_opt={"size": "1g"}, network_mode="none")
        created = client.api.create_container(images[0].id, command=["true"], host_config=config)
    except docker.errors.APIError as exc:
        refused = "storage-opt" in str(exc) or "pquota" in str(exc)
        if refused:
            log.warning("this Docker engine on xfs refuses a container's size (%s): no quota", exc.explanation)
        return refused
    except DOCKER_ERRORS:
        return False
    with contextlib.suppress(*DOCKER_ERRORS):
        client.api.remove_container(created["Id"], force=True)
    return False


def _say_no_quota(driver: str, engine_id: str) -> None:
    # Every run on such an engine would repeat the same paragraph: the console gets one line, once per engine.
    if first_notice(engine_id):
        log.warning(
            "no disk quota for sandboxes on this Docker engine (%s): a file system each, or a watch (disk_layer; "
            "said once per engine; docs/sandbox.md#disk-quota says how to get one)",
            driver,
        )
    log.info(
        "no disk quota for sandbox containers: this Docker engine's storage driver (%s) cannot size a container. "
        "Each container's writable layer gets an ext4 file system of its own, its disk limit in size, where this "
        "process is root on the engine's host with loop devices (disk_layer, air.sandbox.disk_image: the kernel "
        "stops writes past it); elsewhere its writable size is checked against the limit every few seconds (a "
        "process writing past it is killed; a moment's writes may land first). Each file the agent writes is "
        "still capped (max_file_size), and /tmp and /dev/shm are bounded. For a quota, %s.",
        driver,
        HOW_TO_GET_ONE,
    )


def notice_marker(engine_id: str) -> Path:
    """The file that says this engine's users were told: ``$XDG_CACHE_HOME/air/engines/<ID>.no-disk-quota``
    (``~/.cache`` without it; ``$AIR_CACHE_DIR`` replaces ``.../air``, which the tests point at their tmp)."""
    xdg = os.environ.get("XDG_CACHE_HOME", "")
    base = Path(xdg) / "air" if os.path.isabs(xdg) else Path.home() / ".cache" / "air"
    base = Path(os.environ["AIR_CACHE_DIR"]) if os.environ.get("AIR_CACHE_DIR") else base
    return base / "engines" / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', engine_id)}.no-disk-quota"


def first_notice(engine_id: str) -> bool:
    """True once per engine ID, whichever process asks first (the marker is created exclusively); True every
    time for an engine without an ID, or where the marker cannot be written."""
    if not engine_id:
        return True
    path = notice_marker(engine_id)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))
    except FileExistsError:
        return False
    except OSError:
        return True
    return True


def can_size(driver: str) -> bool:
    return driver.startswith(_SIZING_DRIVERS) or driver == "overlay2 on xfs"


def watches_disk(config: SandboxConfig, driver: str | None) -> bool:
    """Does a container need its writable size watched (a disk limit, and no quota from the engine to keep it)?"""
    return bool(config.disk) and not (driver is not None and can_size(driver))


def human_size(count: int) -> str:
    """Bytes as ``du -h`` writes them (binary units): 64M, 1.5G."""
    for unit in ("t", "g", "m", "k"):
        if count >= SIZE_UNITS[unit]:
            return f"{count / SIZE_UNITS[unit]:.1f}".removesuffix(".0") + unit.upper()
    return f"{count}B"


def tmpfs_options(size: str) -> str:
    """A tmpfs of ``size`` with a bound on its files (``nr_inodes``): an empty file costs no bytes but kernel
    memory that no kill frees, and without a bound a container's memory filled with them."""
    return f"rw,nosuid,nodev,mode=1777,size={size},nr_inodes={tmpfs_inodes(size_bytes(size))}"


def storage_kwargs(config: SandboxConfig, driver: str | None) -> dict[str, Any]:
    """The ``containers.run`` arguments that bound what the container writes, on an engine with ``driver``.
    /dev/shm is a tmpfs mount of ours, not ``shm_size`` (which has no inode bound): the engine then makes none."""
    tmpfs = {"/tmp": tmpfs_options(config.tmp_size), "/dev/shm": tmpfs_options(config.shm_size)}
    kwargs: dict[str, Any] = {"tmpfs": tmpfs}
    if config.disk and driver is not None and can_size(driver):
        kwargs["storage_opt"] = {"size": config.disk}
    return kwargs


def quota_route(proc: Path = Path("/proc"), sys: Path = Path("/sys")) -> str:
    """The file system ``scripts/engine_quota.sh`` would take on this machine: "xfs" where the kernel's xfs has
    quotas (``/proc/fs/xfs/xqm``: CONFIG_XFS_QUOTA), "btrfs" where its loaded xfs has none and its btrfs has simple
    quotas, "" where that cannot be told (xfs not loaded yet: the script's trial mount decides)."""
    if (proc / "fs" / "xfs" / "xqm").exists():
        return "xfs"
    if (proc / "fs" / "xfs").is_dir() and (sys / "fs" / "btrfs" / "features" / "simple_quota").exists():
        return "btrfs"
    return ""


def quota_summary(driver: str | None, route: str | None = None) -> tuple[bool, str]:
    """(whether containers get a quota, the line ``air check`` prints) for an engine with ``driver``; ``route``:
    ``quota_route()``'s answer (asked when None), named in the step to get one."""
    if driver is not None and can_size(driver):
        how = "overlay2 on xfs, pquota" if driver == "overlay2 on xfs" else driver
        return True, f"engine quota ({how}): each container's writes stop at its disk limit"
    route = quota_route() if route is None else route
    here = {
        "xfs": " (here: xfs with project quotas)",
        "btrfs": " (here: btrfs with simple quotas, as this kernel's xfs has no quotas)",
    }.get(route, "")
    return False, (
        f"watched (no quota: {driver or 'the engine did not say'}): a fast writer gets past the limit until the "
        f"next check, fallocate by up to what the disk holds (docs/sandbox.md#disk-quota); one-line step to get "
        f"one: `{QUOTA_STEP}`{here}"
    )


def quota_refused_hint(exc: BaseException, config: SandboxConfig) -> str:
    """A hint for a create the engine refused over the quota ('' when that was not the reason)."""
    text = str(exc)
    # First: overlay2's refusal names the option and "pquota", which the next test would take for a limit too low.
    if "storage-opt" in text or "storage opt" in text:
        return f" (this engine cannot size containers: {HOW_TO_GET_ONE})"
    if "qgroup" in text or "quota exceeded" in text:
        return (
            f" (the disk limit {config.disk!r} is below what this engine counts against it; btrfs counts the image's "
            "files too: raise it)"
        )
    return ""


def driver_or_none(client: docker.DockerClient) -> str | None:
    """``storage_driver``, or None when the engine cannot say (the create then runs without a quota)."""
    try:
        return storage_driver(client)
    except DOCKER_ERRORS as exc:
        log.warning("cannot ask the Docker engine for its storage driver (no disk quota this time): %s", exc)
        return None
