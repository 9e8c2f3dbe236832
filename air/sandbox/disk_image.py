"""A container's writable layer on a file system of its own, ``disk`` in size, where the engine cannot size one.

On overlay2 over ext4 (most hosts) the engine has no quota (``storage``). Instead, between the container's create
and its start, the folder that holds its writable layer (``<data root>/overlay2/<id>``: ``diff``, the upper folder,
and ``work``, which overlayfs wants on the same mount) becomes a file system of its own: a sparse image file made
ext4 by ``mkfs.ext4 -d`` from that folder's contents (two small files, three empty folders), loop-mounted over the
folder (the loop device cleared with the last unmount: autoclear) and unlinked at once. The engine then mounts the
container's root over it as it always does. Every write of the container, root's and the agent's, any path but
the tmpfs mounts (/tmp, /dev/shm), lands there, and the kernel answers one past the limit with "No space left on
device", whatever holds the file: a deleted file kept by a descriptor in flight (SCM_RIGHTS) or a memory mapping,
which the watch (``disk_watch``) cannot see, included. Its inodes are bounded too (one per 8 KiB), the image is the
limit plus ext4's own metadata (``image_bytes``: the agent gets about the limit), and the host's disk gives it at
most what was written (sparse, no journal, inode tables never zeroed).

Nothing is left behind: the engine's removal of the layer unmounts what is mounted under it (moby's
EnsureRemoveAll: a recursive unmount, then the folder removed), which frees the loop device (autoclear) and then
the unlinked image; ``release`` unmounts one an engine left mounted after the removal (``destroy_container``, the
orphan reaper's path too), and ``sweep`` unlinks an image a process killed mid-way (before its unlink) left.

It needs this process as root on the engine's own host and mount namespace (local socket, the data root here),
overlay2, loop devices and mkfs.ext4. ``disk_layer`` picks: "auto" (the default) uses it where the host can, else
falls back to the watch with one warning; "loop" requires it (a start fails with the reason, naming the
setting); "watch" never uses it. A start checks the engine mounted the container's root over it (``confirm``:
an engine in another mount namespace would not see it).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import subprocess
import threading
import time
import weakref
from pathlib import Path
from typing import TYPE_CHECKING

from air.sandbox.engine import DOCKER_ERRORS
from air.sandbox.errors import SandboxStartError
from air.sandbox.storage import can_size

if TYPE_CHECKING:
    import docker
    from docker.models.containers import Container

    from air.sandbox.config import SandboxConfig

log = logging.getLogger(__name__)

IMAGES = "air-disks"  # next to the engine's data root: images live here only between their create and mount
BYTES_PER_INODE = 8192
STALE_S = 60.0  # an image older than this was left by a process killed before its unlink (``sweep``)
MKFS = ["mkfs.ext4", "-q", "-F", "-b", "4096", "-i", str(BYTES_PER_INODE), "-I", "256", "-m", "0"]
MKFS += ["-O", "^has_journal,^resize_inode"]  # no journal: the file system lives as long as its container
MOUNT_OPTIONS = "loop,noinit_itable"  # mount sets autoclear on the loop device; inode tables stay sparse
COMMAND_S = 60.0

# client -> (the engine's data root, or the reason this host cannot give containers a file system of their own)
_hosts: weakref.WeakKeyDictionary[docker.DockerClient, tuple[Path | None, str]] = weakref.WeakKeyDictionary()
_lock = threading.Lock()
_said: set[str] = set()  # fall-backs said once per process


class NoOwnFs(Exception):
    """This container's layer could not be given a file system of its own."""


def image_bytes(limit: int) -> int:
    """The image for a limit of ``limit`` bytes: ext4's metadata (inode tables 1/32, the rest within 4 MiB) on top,
    so that about ``limit`` is free for files (measured: 200 of 200m, 1011 of 1024m, 20442 of 20480m)."""
    return limit + limit // 32 + (4 << 20)


def host_problem(client: docker.DockerClient) -> tuple[Path | None, str]:
    """(the engine's data root, '') where this process can give containers a file system of their own, else
    (None, why not); asked once per client (an engine that did not answer is asked again next time)."""
    with _lock:
        if client in _hosts:
            return _hosts[client]
        answer = _ask_host(client)
        if not answer[1].startswith("cannot ask"):
            _hosts[client] = answer
        return answer


def _ask_host(client: docker.DockerClient) -> tuple[Path | None, str]:
    if os.geteuid() != 0:
        return None, "this process is not root"
    if not Path("/dev/loop-control").exists():
        return None, "this host has no loop devices (/dev/loop-control)"
    missing = [tool for tool in ("mkfs.ext4", "mount", "umount") if shutil.which(tool) is None]
    if missing:
        return None, f"{', '.join(missing)} not found"
    if not str(getattr(client.api, "base_url", "")).startswith("http+docker://localhost"):
        return None, "the Docker engine is not on this machine (not a local socket)"
    try:
        info = client.info()
    except DOCKER_ERRORS as exc:
        return None, f"cannot ask the engine ({exc})"
    if info.get("Driver") != "overlay2":
        return None, f"the engine's storage driver is {info.get('Driver')!r}, not overlay2"
    root = Path(str(info.get("DockerRootDir") or "/nonexistent"))
    if not (root / "overlay2").is_dir():
        return None, f"the engine's data root {root} is not on this machine's file system"
    return root, ""


def wanted(config: SandboxConfig, driver: str | None, client: docker.DockerClient) -> Path | None:
    """The engine's data root where a container made with ``config`` gets a file system of its own, else None
    (the engine's quota keeps the limit, there is no limit, ``disk_layer`` is "watch", or "auto" on a host that
    cannot: said once). Raises SandboxStartError for "loop" on a host that cannot."""
    if not config.disk or config.disk_layer == "watch" or (driver is not None and can_size(driver)):
        return None
    root, problem = host_problem(client)
    if root is not None:
        return root
    fall_back(config, problem)
    return None


def fall_back(config: SandboxConfig, problem: str) -> None:
    """For ``disk_layer`` "loop": raise; for "auto": one warning per process, the watch keeps the limit."""
    if config.disk_layer == "loop":
        raise SandboxStartError(
            f"disk_layer is 'loop' but this container cannot get a file system of its own: {problem} (it needs "
            "this process as root on the Docker engine's host, overlay2, loop devices and mkfs.ext4; set "
            "disk_layer to 'auto' or 'watch' to watch its disk use instead)"
        )
    if problem not in _said:
        _said.add(problem)
        log.warning(
            "sandbox disks: no file system of their own (%s); their disk use is watched instead (disk_layer='auto'; "
            "a file held only by a descriptor in flight or a mapping escapes the watch: docs/security.md)",
            problem,
        )


class LayerFs:
    """One create's file system of its own (none where ``root`` is None): ``prepare`` between the container's create
    and its start, ``confirm`` after; for "auto", a failure of either leaves the container to the watch."""

    def __init__(self, config: SandboxConfig, root: Path | None) -> None:
        self.config, self.root = config, root
        self.layer: Path | None = None

    def prepare(self, container: Container) -> None:
        if self.root is None:
            return
        try:
            self.layer = give_own_fs(container, self.root, self.config.disk_bytes)
        except NoOwnFs as exc:
            fall_back(self.config, str(exc))

    def confirm(self, container: Container) -> bool:
        """Whether the started container's writes are bounded by its own file system (raises for "loop")."""
        if self.layer is None:
            return False
        try:
            confirm(container, self.layer)
        except NoOwnFs as exc:
            fall_back(self.config, str(exc))
            return False
        return True


def _graph(container: Container) -> dict:
    """The engine's word on the container's layers (``GraphDriver``: its ``Name`` and the folders in ``Data``)."""
    return (getattr(container, "attrs", None) or {}).get("GraphDriver") or {}


def layer_dir(container: Container, root: Path) -> Path:
    """The folder holding the container's upper and work folders (``<root>/overlay2/<id>``)."""
    graph = _graph(container)
    data = graph.get("Data") or {}
    upper, work = Path(str(data.get("UpperDir") or "")), Path(str(data.get("WorkDir") or ""))
    layer = upper.parent
    if graph.get("Name") != "overlay2" or not data.get("UpperDir") or work.parent != layer:
        raise NoOwnFs(f"the engine did not give the container's layer folders ({graph})")
    if layer.parent != root / "overlay2" or not layer.is_dir():
        raise NoOwnFs(f"the container's layer {layer} is not under {root / 'overlay2'} here")
    return layer


def _run(argv: list[str]) -> None:
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NoOwnFs(f"{argv[0]}: {exc}") from exc
    if done.returncode != 0:
        raise NoOwnFs(f"{argv[0]} failed ({done.returncode}): {(done.stderr or done.stdout).strip()}")


def give_own_fs(container: Container, root: Path, limit: int) -> Path:
    """Put the created (not yet started) container's writable layer on a file system of ``limit`` bytes of its
    own; returns the layer's folder. Raises NoOwnFs (nothing of it left: the image unlinked, nothing mounted)."""
    layer = layer_dir(container, root)
    before = os.stat(layer)
    images = root.parent / IMAGES
    images.mkdir(mode=0o700, exist_ok=True)
    image = images / f"{container.id}.img"
    try:
        with open(image, "wb") as file:
            file.truncate(image_bytes(limit))
        owner = f"root_owner={before.st_uid}:{before.st_gid},nodiscard"
        _run([*MKFS, "-E", owner, "-d", str(layer), str(image)])
        _run(["mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(layer)])
    except OSError as exc:
        raise NoOwnFs(f"{image}: {exc}") from exc
    finally:
        with contextlib.suppress(OSError):
            image.unlink()  # the loop device holds it: its blocks go with the last unmount
    os.chmod(layer, stat.S_IMODE(before.st_mode))
    return layer


def confirm(container: Container, layer: Path) -> None:
    """Check the started container's root is the engine's overlay over ``layer``'s own file system (overlayfs
    reports its upper file system's size); raises NoOwnFs where the engine did not see it."""
    container.reload()
    merged = Path(str((_graph(container).get("Data") or {}).get("MergedDir") or ""))
    if merged.parent != layer or not os.path.ismount(merged) or not os.path.ismount(layer):
        raise NoOwnFs(f"the engine did not mount the container's root over {layer} (another mount namespace?)")
    if os.statvfs(merged).f_blocks != os.statvfs(layer).f_blocks:
        raise NoOwnFs(f"the container's root is not on the file system mounted at {layer}")


def mounted(path: Path) -> bool:
    with contextlib.suppress(OSError):
        return os.path.ismount(path)
    return False


def release(layer: Path | None) -> None:
    """After the container's removal: unmount its layer's file system where the engine left it mounted (detached:
    the loop device and the image go with its last user); quiet when already gone."""
    if layer is None or not mounted(layer):
        return
    log.warning("the engine left %s mounted after removing its container: unmounting it", layer)
    with contextlib.suppress(NoOwnFs):
        _run(["umount", "--recursive", "--lazy", str(layer)])
    with contextlib.suppress(OSError):
        layer.rmdir()


def own_layer(container: Container) -> Path | None:
    """The container's layer folder where it is a mount point (a file system of its own), else None."""
    data = _graph(container).get("Data") or {}
    if not data.get("UpperDir"):
        return None
    layer = Path(str(data["UpperDir"])).parent
    return layer if mounted(layer) else None


def sweep(client: docker.DockerClient) -> int:
    """Unlink images a process killed between their create and their unlink left (older than ``STALE_S``: a
    mounted one lives on in its loop device); returns how many."""
    root, _ = host_problem(client)
    images = root.parent / IMAGES if root is not None else None
    if images is None or not images.is_dir():
        return 0
    gone = 0
    for image in images.glob("*.img"):
        with contextlib.suppress(OSError):
            if time.time() - image.stat().st_mtime > STALE_S:
                image.unlink()
                gone += 1
    return gone
