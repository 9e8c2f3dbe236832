"""Build the sandbox image that agent rollouts run in.

The recipe is the ``docker/`` folder (``Dockerfile`` and any helper files). Its content hash
names the image, ``air-sandbox:<hash12>``, so the image is rebuilt only when the recipe
changes. Everything goes through the Docker SDK (``docker`` package); nothing parses the
docker CLI's output.

Where the Dockerfile's base (``debian:bookworm-slim``) cannot be pulled (no registry
reachable), the builder makes the base itself: ``debootstrap --variant=minbase bookworm``,
slimmed like the official ``-slim`` image, imported as ``air-debian-base:bookworm`` and
passed to the build as ``BASE_IMAGE``. The imported base is reused by later builds.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TextIO

if TYPE_CHECKING:
    import docker

IMAGE_REPOSITORY = "air-sandbox"
RECIPE_LABEL = "air.recipe"
HASH_LENGTH = 12

DEFAULT_BASE_IMAGE = "debian:bookworm-slim"  # fallback when the Dockerfile has no ARG BASE_IMAGE=...
DEBIAN_SUITE = "bookworm"
DEBOOTSTRAP_BASE_IMAGE = "air-debian-base:bookworm"
DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEFAULT_DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"

# The runtime also accepts MLGym's own agent image (tools in the conda env `mlgym_generic`)
# in place of air-sandbox; it is pulled from Docker Hub, never built here.
MLGYM_IMAGE = "aigym/mlgym-agent:latest"

BaseMode = Literal["auto", "registry", "debootstrap"]
BASE_MODES: tuple[str, ...] = ("auto", "registry", "debootstrap")

# Files in docker/ that are never part of the recipe (hash or build context).
_IGNORED_NAMES = {"__pycache__", ".DS_Store", ".git"}
_IGNORED_SUFFIXES = (".pyc", ".pyo", ".swp", "~")


# --------------------------------------------------------------------------- errors


class AirImageError(RuntimeError):
    """Anything that stops the sandbox image from being built; the message says what to do."""


class RecipeNotFoundError(AirImageError):
    pass


class DockerUnavailableError(AirImageError):
    pass


class BaseImageError(AirImageError):
    pass


class DebootstrapError(BaseImageError):
    pass


class ImageBuildError(AirImageError):
    pass


# --------------------------------------------------------------------------- recipe


def recipe_dir_candidates() -> list[Path]:
    """Where the recipe may live, in the order they are tried.

    An installed wheel carries it as ``air/_docker`` (hatch ``force-include``). In a source
    checkout it is ``<repo>/docker`` next to the ``air`` package. The wheel location is tried
    first because, in site-packages, ``<parent of air>/docker`` is the Docker SDK package.
    """
    package_dir = Path(__file__).resolve().parent
    return [package_dir / "_docker", package_dir.parent / "docker"]


def find_recipe_dir(candidates: Iterable[Path] | None = None) -> Path:
    """The first candidate folder that holds a ``Dockerfile``."""
    paths = list(candidates) if candidates is not None else recipe_dir_candidates()
    for path in paths:
        if (path / "Dockerfile").is_file():
            return path
    looked = " and ".join(str(p) for p in paths)
    raise RecipeNotFoundError(
        f"Cannot find the sandbox image recipe (a folder with a Dockerfile): looked in {looked}. "
        "In a source checkout it is <repo>/docker; an installed wheel must package it as air/_docker."
    )


def recipe_files(recipe_dir: Path | str | None = None) -> list[tuple[str, Path]]:
    """``(relative posix path, absolute path)`` of every recipe file, sorted by relative path."""
    root = Path(recipe_dir) if recipe_dir is not None else find_recipe_dir()
    if not (root / "Dockerfile").is_file():
        raise RecipeNotFoundError(f"{root} has no Dockerfile")
    found: list[tuple[str, Path]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _IGNORED_NAMES)
        for name in filenames:
            if name in _IGNORED_NAMES or name.endswith(_IGNORED_SUFFIXES):
                continue
            path = Path(dirpath) / name
            if path.is_file():
                found.append((path.relative_to(root).as_posix(), path))
    return sorted(found)


def recipe_hash(recipe_dir: Path | str | None = None, length: int = HASH_LENGTH) -> str:
    """Short sha256 over the recipe's relative paths and contents (location-independent)."""
    digest = hashlib.sha256()
    for rel, path in recipe_files(recipe_dir):
        data = path.read_bytes()
        name = rel.encode()
        # Length-prefixed fields, so no two different recipes serialize alike.
        digest.update(b"%d:%s\0%d:" % (len(name), name, len(data)))
        digest.update(data)
    return digest.hexdigest()[:length]


def image_repository() -> str:
    return IMAGE_REPOSITORY


def image_tag_for(recipe_dir: Path | str | None = None) -> str:
    return f"{IMAGE_REPOSITORY}:{recipe_hash(recipe_dir)}"


def default_image_tag() -> str:
    """The tag the current recipe builds to: ``air-sandbox:<hash12>``."""
    return image_tag_for(None)


def dockerfile_default_base(recipe_dir: Path | str | None = None) -> str:
    """The default of ``ARG BASE_IMAGE=...`` in the Dockerfile (the image 'registry' mode pulls)."""
    root = Path(recipe_dir) if recipe_dir is not None else find_recipe_dir()
    text = (root / "Dockerfile").read_text()
    match = re.search(r"^\s*ARG\s+BASE_IMAGE=(\S+)\s*$", text, flags=re.MULTILINE | re.IGNORECASE)
    return match.group(1).strip("\"'") if match else DEFAULT_BASE_IMAGE


def _build_context(recipe_dir: Path | str | None) -> io.BytesIO:
    """A tar of exactly the hashed files, with fixed metadata so the build cache is content-keyed."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for rel, path in recipe_files(recipe_dir):
            data = path.read_bytes()
            info = tarfile.TarInfo(rel)
            info.size = len(data)
            info.mode = 0o644
            info.mtime = 0
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


# --------------------------------------------------------------------------- docker helpers


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
            f"Cannot reach the Docker engine at {where}: {_one_line(exc)}. "
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


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


# --------------------------------------------------------------------------- progress


class Progress:
    """Receives build progress. The base class ignores everything (silent builds)."""

    def phase(self, text: str) -> None:
        """A stage of the whole job (e.g. 'Running debootstrap')."""

    def step(self, text: str) -> None:
        """A build step header ('Step 3/7 : RUN ...')."""

    def log(self, line: str) -> None:
        """Any other output line (apt, debootstrap, ...)."""

    def close(self) -> None:
        pass


class RichProgress(Progress):
    """Spinner + status line on a terminal (phases and steps printed above it); plain lines otherwise.

    With ``verbose`` every log line is printed too.
    """

    def __init__(self, file: TextIO | None = None, verbose: bool = False) -> None:
        from rich.console import Console

        self.file = file if file is not None else sys.stderr
        self.verbose = verbose
        self.console = Console(file=self.file, highlight=False)
        self.is_tty = self.console.is_terminal
        self._status = None
        self._label = ""

    def _print(self, text: str, style: str | None = None) -> None:
        if self.is_tty:
            self.console.print(text, style=style, markup=False, soft_wrap=True)
        else:
            print(text, file=self.file, flush=True)

    def _set_status(self, text: str) -> None:
        if not self.is_tty:
            return
        from rich.text import Text

        width = max(self.console.width - 4, 20)
        text = text if len(text) <= width else text[: width - 1] + "…"
        if self._status is None:
            self._status = self.console.status(Text(text), spinner="dots")
            self._status.start()
        else:
            self._status.update(Text(text))

    def phase(self, text: str) -> None:
        self._label = text
        self._print(text, style="bold")
        self._set_status(text)

    def step(self, text: str) -> None:
        self._label = text
        self._print(text, style="cyan")
        self._set_status(text)

    def log(self, line: str) -> None:
        if self.verbose:
            self._print(line, style="dim")
        if line.strip():
            self._set_status(f"{self._label[:40]} | {line.strip()}" if self._label else line.strip())

    def close(self) -> None:
        if self._status is not None:
            self._status.stop()
            self._status = None


def _as_progress(progress: Progress | bool | None) -> Progress:
    if isinstance(progress, Progress):
        return progress
    return RichProgress() if progress else Progress()


# --------------------------------------------------------------------------- base image


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
    progress = _as_progress(progress)
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
            raise DebootstrapError(f"Importing {DEBOOTSTRAP_BASE_IMAGE} failed: {_one_line(exc)}") from exc
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
        raise BaseImageError(f"Pulling {ref} failed: {_one_line(exc)}") from exc
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
    progress = _as_progress(progress)
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


# --------------------------------------------------------------------------- build


@dataclasses.dataclass(frozen=True)
class BuildResult:
    tag: str
    built: bool  # False: the tag already existed, nothing was done
    base_image: str | None = None
    image_id: str | None = None
    seconds: float = 0.0


def _stream_lines(events: Iterator[dict[str, Any]]) -> Iterator[tuple[str, str]]:
    """Flatten the build API's JSON events into (kind, text); kind is line / status / error / id."""
    pending = ""
    for event in events:
        if "error" in event:
            detail = event.get("errorDetail") or {}
            yield "error", str(detail.get("message") or event["error"])
        if "stream" in event:
            pending += event["stream"]
            *lines, pending = pending.split("\n")
            for line in lines:
                yield "line", line.rstrip("\r")
        if "status" in event:
            yield "status", " ".join(str(event.get(k, "")) for k in ("id", "status", "progress")).strip()
        aux = event.get("aux")
        if isinstance(aux, dict) and aux.get("ID"):
            yield "id", aux["ID"]
    if pending:
        yield "line", pending


# Classic-builder bookkeeping lines, kept in the error tail but not shown as progress.
_BUILDER_CHATTER = ("--->", "Removing intermediate container", "Successfully built", "Successfully tagged")


def _run_build(
    client: docker.DockerClient,
    tag: str,
    recipe_dir: Path | str | None,
    base_image: str,
    labels: dict[str, str],
    nocache: bool,
    progress: Progress,
) -> str | None:
    from docker.errors import DockerException
    from requests.exceptions import RequestException

    tail: deque[str] = deque(maxlen=40)
    step = "(before the first step)"
    image_id: str | None = None
    error: str | None = None
    try:
        events = client.api.build(
            fileobj=_build_context(recipe_dir),
            custom_context=True,
            tag=tag,
            buildargs={"BASE_IMAGE": base_image},
            labels=labels,
            nocache=nocache,
            rm=True,
            forcerm=True,
            pull=False,
            decode=True,
        )
        for kind, text in _stream_lines(events):
            if kind == "error":
                error = text
                break
            if kind == "id":
                image_id = text
            elif kind == "line" and text.startswith("Step "):
                step = " ".join(text.split())  # RUN lines keep their continuation indents
                tail.append(step)
                progress.step(step if len(step) <= 160 else step[:159] + "…")
            elif text:
                tail.append(text)
                if not text.lstrip().startswith(_BUILDER_CHATTER):
                    progress.log(text)
    except (DockerException, RequestException) as exc:
        error = _one_line(exc)
    if error is not None:
        raise ImageBuildError(
            f"Building {tag} failed at {step}\n{error}\n--- last build output ---\n" + "\n".join(tail)
        )
    return image_id


def build_image(
    base: str = "auto",
    force: bool = False,
    progress: Progress | bool | None = True,
    *,
    client: docker.DockerClient | None = None,
    recipe_dir: Path | str | None = None,
) -> BuildResult:
    """Build ``air-sandbox:<recipe hash>`` unless it already exists (``force`` rebuilds, without cache).

    ``base`` chooses where the base image comes from (see :func:`resolve_base`). ``progress`` is a
    :class:`Progress`, True for a rich spinner/plain lines on stderr, or False/None for silence.
    """
    start = time.monotonic()
    reporter = _as_progress(progress)
    try:
        digest = recipe_hash(recipe_dir)
        tag = f"{IMAGE_REPOSITORY}:{digest}"
        client = client if client is not None else get_client()
        if not force and image_exists(client, tag):
            reporter.phase(f"{tag} is up to date")
            return BuildResult(tag=tag, built=False, seconds=time.monotonic() - start)
        base_image = resolve_base(client, base, reporter, recipe_dir)
        reporter.phase(f"Building {tag} from {base_image}")
        labels = {RECIPE_LABEL: digest, "air.base": base_image}
        image_id = _run_build(client, tag, recipe_dir, base_image, labels, force, reporter)
        if not image_exists(client, tag):
            raise ImageBuildError(f"The build of {tag} finished but the tag is missing")
        seconds = time.monotonic() - start
        reporter.phase(f"Built {tag} in {seconds:.0f}s")
        return BuildResult(tag=tag, built=True, base_image=base_image, image_id=image_id, seconds=seconds)
    finally:
        reporter.close()
