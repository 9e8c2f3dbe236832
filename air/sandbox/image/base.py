"""The Debian base the recipe builds on: pulled from a registry, or made locally with debootstrap."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
import time
from collections import deque
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import docker
from air.sandbox.image.progress import Progress, as_progress, one_line
from air.sandbox.image.recipe import (
    BASE_MODES,
    DEBIAN_SUITE,
    DEBOOTSTRAP_BASE_IMAGE,
    DEFAULT_DEBIAN_MIRROR,
    DEFAULT_DEBIAN_SECURITY_MIRROR,
    AirImageError,
    BaseImageError,
    DebootstrapError,
    DockerUnavailableError,
    dockerfile_default_base,
)


def get_client() -> docker.DockerClient:
    """A Docker SDK client that has answered a ping, or DockerUnavailableError."""
    import docker
    from docker.errors import DockerException

    where = os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"
    try:
        client = docker.from_env()
        client.ping()
    except (DockerException, OSError) as exc:
        raise DockerUnavailableError(
            f"Cannot reach the Docker engine at {where}: {one_line(exc)}. "
            "Start it (e.g. `systemctl start docker`, or `dockerd > /var/log/dockerd.log 2>&1 &`) "
            "or point DOCKER_HOST at one."
        ) from exc
    return client


def image_exists(client: docker.DockerClient, tag: str) -> bool:
    from docker.errors import ImageNotFound

    try:
        client.images.get(tag)
    except ImageNotFound:
        return False
    return True


def _split_reference(ref: str) -> tuple[str, str]:
    """``repo[:tag]`` -> (repo, tag); a ``host:port/`` prefix is not a tag."""
    name, sep, tag = ref.rpartition(":")
    if sep and "/" not in tag:
        return name, tag
    return ref, "latest"


def _mounts_under(path: Path) -> list[str]:
    prefix = str(path.resolve()).rstrip("/") + "/"
    try:
        lines = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return []
    points = [line.split()[1].replace("\\040", " ") for line in lines if len(line.split()) > 1]
    return sorted((p for p in points if p.startswith(prefix)), key=len, reverse=True)


def _remove_tree(path: Path) -> None:
    """rmtree, after unmounting anything a failed debootstrap left mounted inside (proc, sys)."""
    for mount in _mounts_under(path):
        subprocess.run(["umount", "-l", mount], check=False, capture_output=True)
    if _mounts_under(path):  # never delete through a live mount
        raise DebootstrapError(f"{path} still has mounts inside; unmount them and delete it by hand")
    shutil.rmtree(path, ignore_errors=True)


def _find_debootstrap() -> str | None:
    return shutil.which("debootstrap") or next(
        (p for p in ("/usr/sbin/debootstrap", "/sbin/debootstrap") if os.access(p, os.X_OK)), None
    )


def debootstrap_problem() -> str | None:
    """Why the debootstrap base cannot be made here, or None when it can."""
    if _find_debootstrap() is None:
        return "debootstrap is not installed (install it with `apt-get install debootstrap`)"
    if hasattr(os, "geteuid") and os.geteuid() != 0:
        return "debootstrap needs root (run `air build-image` as root)"
    if shutil.which("tar") is None:
        return "tar is not installed"
    return None


_DPKG_SLIM = """\
# As in Docker's official -slim Debian images: no docs, man pages or translations.
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/groff/*
path-exclude /usr/share/info/*
path-exclude /usr/share/lintian/*
path-exclude /usr/share/linda/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
"""

_APT_RM = "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"
_APT_CLEAN = f"""\
DPkg::Post-Invoke {{ "{_APT_RM}"; }};
APT::Update::Post-Invoke {{ "{_APT_RM}"; }};
Dir::Cache::pkgcache "";
Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
"""


def _slim_rootfs(root: Path, mirror: str) -> None:
    """Make a debootstrap minbase look like debian:bookworm-slim (same sources, no docs, no caches)."""
    (root / "etc/dpkg/dpkg.cfg.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/dpkg/dpkg.cfg.d/docker").write_text(_DPKG_SLIM)
    (root / "etc/apt/apt.conf.d").mkdir(parents=True, exist_ok=True)
    (root / "etc/apt/apt.conf.d/docker-clean").write_text(_APT_CLEAN)

    # Same suites as the official image, so both bases give the same package versions.
    security = os.environ.get("AIR_DEBIAN_SECURITY_MIRROR")
    if security is None and mirror.rstrip("/") == DEFAULT_DEBIAN_MIRROR:
        security = DEFAULT_DEBIAN_SECURITY_MIRROR
    lines = [f"deb {mirror} {DEBIAN_SUITE} main", f"deb {mirror} {DEBIAN_SUITE}-updates main"]
    if security:
        lines.append(f"deb {security} {DEBIAN_SUITE}-security main")
    (root / "etc/apt/sources.list").write_text("\n".join(lines) + "\n")

    # Docker provides these at run time; do not bake the host's into the image.
    for name in ("etc/resolv.conf", "etc/hostname"):
        path = root / name
        if path.is_file() and not path.is_symlink():
            path.write_text("")
    (root / "etc/hosts").write_text("127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")

    share = root / "usr/share"
    for sub in ("man", "groff", "info", "lintian", "linda"):
        for child in (share / sub).glob("*"):
            _rm(child)
    for child in (share / "locale").glob("*"):
        if child.name != "locale.alias":
            _rm(child)
    for pkg_doc in (share / "doc").glob("*"):
        if pkg_doc.is_dir() and not pkg_doc.is_symlink():
            for item in pkg_doc.iterdir():
                if item.name != "copyright":
                    _rm(item)
    for pattern in ("var/lib/apt/lists/*", "var/cache/apt/*.bin", "var/cache/apt/archives/*.deb"):
        for item in root.glob(pattern):
            if item.name not in ("partial", "lock"):
                _rm(item)
    for item in (root / "var/log").rglob("*"):
        if item.is_file():
            item.write_bytes(b"")


def _rm(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _run_streaming(cmd: list[str], progress: Progress, tail: deque[str]) -> int:
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace", bufsize=1
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        line = line.rstrip("\n")
        tail.append(line)
        progress.log(line)
    return proc.wait()


def _work_parent() -> str:
    """Somewhere on a real disk: /tmp may be a nodev tmpfs, where debootstrap's /dev/null fails."""
    configured = os.environ.get("AIR_TMPDIR")
    if configured:
        return configured
    return "/var/tmp" if os.path.isdir("/var/tmp") else tempfile.gettempdir()


def ensure_debootstrap_base(
    client: docker.DockerClient, progress: Progress | bool | None = False, rebuild: bool = False
) -> str:
    """``air-debian-base:bookworm``: reused when already imported, else debootstrapped and imported."""
    progress = as_progress(progress)
    if not rebuild and image_exists(client, DEBOOTSTRAP_BASE_IMAGE):
        progress.phase(f"Reusing base image {DEBOOTSTRAP_BASE_IMAGE}")
        return DEBOOTSTRAP_BASE_IMAGE
    problem = debootstrap_problem()
    if problem:
        raise DebootstrapError(f"Cannot make the base image {DEBOOTSTRAP_BASE_IMAGE}: {problem}.")

    mirror = os.environ.get("AIR_DEBIAN_MIRROR") or DEFAULT_DEBIAN_MIRROR
    debootstrap = _find_debootstrap()
    assert debootstrap is not None
    work = Path(tempfile.mkdtemp(prefix="air-debootstrap-", dir=_work_parent()))
    rootfs, tarball = work / "rootfs", work / "rootfs.tar"
    tail: deque[str] = deque(maxlen=30)
    try:
        start = time.monotonic()
        progress.phase(f"Running debootstrap --variant=minbase {DEBIAN_SUITE} from {mirror}")
        cmd = [debootstrap, "--variant=minbase", DEBIAN_SUITE, str(rootfs), mirror]
        rc = _run_streaming(cmd, progress, tail)
        if rc != 0:
            raise DebootstrapError(
                f"debootstrap exited with {rc} (mirror {mirror}; set AIR_DEBIAN_MIRROR to use another). "
                "Last lines:\n" + "\n".join(tail)
            )
        progress.phase(f"debootstrap done in {time.monotonic() - start:.0f}s; slimming and packing the rootfs")
        _slim_rootfs(rootfs, mirror)
        tar_cmd = [
            "tar", "--numeric-owner", "--xattrs", "--xattrs-include=*", "-C", str(rootfs),
            "--exclude=./dev/*", "--exclude=./proc/*", "--exclude=./sys/*",
            "--exclude=./tmp/*", "--exclude=./var/tmp/*", "-cf", str(tarball), ".",
        ]  # fmt: skip
        packed = subprocess.run(tar_cmd, capture_output=True, text=True, errors="replace")
        if packed.returncode != 0:
            raise DebootstrapError(f"tar of the rootfs failed: {packed.stderr.strip()[-2000:]}")

        progress.phase(f"Importing the rootfs as {DEBOOTSTRAP_BASE_IMAGE}")
        repo, tag = _split_reference(DEBOOTSTRAP_BASE_IMAGE)
        changes = [
            'CMD ["bash"]',
            "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
            f"LABEL air.base=debootstrap-minbase-{DEBIAN_SUITE} air.base.mirror={mirror}",
        ]
        from docker.errors import DockerException

        try:
            client.api.import_image_from_file(str(tarball), repository=repo, tag=tag, changes=changes)
        except DockerException as exc:
            raise DebootstrapError(f"Importing {DEBOOTSTRAP_BASE_IMAGE} failed: {one_line(exc)}") from exc
        if not image_exists(client, DEBOOTSTRAP_BASE_IMAGE):
            raise DebootstrapError(f"Importing {DEBOOTSTRAP_BASE_IMAGE} reported success but the tag is missing")
        return DEBOOTSTRAP_BASE_IMAGE
    finally:
        _remove_tree(work)


def pull_image(client: docker.DockerClient, ref: str, progress: Progress) -> None:
    from docker.errors import DockerException

    repo, tag = _split_reference(ref)
    progress.phase(f"Pulling {ref}")
    try:
        for event in client.api.pull(repo, tag=tag, stream=True, decode=True):
            if "error" in event:
                raise BaseImageError(f"Pulling {ref} failed: {event['error']}")
            status = " ".join(str(event.get(k, "")) for k in ("id", "status", "progress")).strip()
            if status:
                progress.log(status)
    except DockerException as exc:
        raise BaseImageError(f"Pulling {ref} failed: {one_line(exc)}") from exc
    if not image_exists(client, ref):
        raise BaseImageError(f"Pulling {ref} finished but the image is not there")


def resolve_base(
    client: docker.DockerClient,
    base: str = "auto",
    progress: Progress | bool | None = False,
    recipe_dir: Path | str | None = None,
) -> str:
    """Pick (and if needed make) the base image; returns its reference.

    - ``registry``: the Dockerfile's default base, pulled if not present locally.
    - ``debootstrap``: ``air-debian-base:bookworm``, reused or made with debootstrap.
    - ``auto``: the default base if present locally; else an already imported debootstrap base;
      else try a pull; else debootstrap. Errors from both routes are reported together.
    """
    progress = as_progress(progress)
    if base not in BASE_MODES:
        raise AirImageError(f"Unknown base mode {base!r}; expected one of {', '.join(BASE_MODES)}")
    registry_base = dockerfile_default_base(recipe_dir)
    if base == "debootstrap":
        return ensure_debootstrap_base(client, progress)
    if image_exists(client, registry_base):
        progress.phase(f"Using local base image {registry_base}")
        return registry_base
    if base == "registry":
        pull_image(client, registry_base, progress)
        return registry_base
    # auto
    if image_exists(client, DEBOOTSTRAP_BASE_IMAGE):
        return ensure_debootstrap_base(client, progress)
    try:
        pull_image(client, registry_base, progress)
        return registry_base
    except BaseImageError as pull_error:
        progress.phase(f"{pull_error}; falling back to debootstrap")
        try:
            return ensure_debootstrap_base(client, progress)
        except DebootstrapError as deboot_error:
            raise BaseImageError(
                f"No base image: {pull_error}\nand the fallback failed too: {deboot_error}"
            ) from deboot_error
