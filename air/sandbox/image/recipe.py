"""The sandbox image's recipe (docker/): where it is, what it hashes to, the tag that names it, and the
errors of building an image."""

from __future__ import annotations

import hashlib
import io
import os
import re
import tarfile
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


IMAGE_REPOSITORY = "air-sandbox"
RECIPE_LABEL = "air.recipe"
HASH_LENGTH = 12

DEFAULT_BASE_IMAGE = "debian:bookworm-slim"  # fallback when the Dockerfile has no ARG BASE_IMAGE=...
DEBIAN_SUITE = "bookworm"
DEBOOTSTRAP_BASE_IMAGE = "air-debian-base:bookworm"
DEFAULT_DEBIAN_MIRROR = "http://deb.debian.org/debian"
DEFAULT_DEBIAN_SECURITY_MIRROR = "http://deb.debian.org/debian-security"

# MLGym's own agent image (tools in the conda env `mlgym_generic`, the agent's): pulled from Docker Hub,
# never built here; a run takes it once prepared by `air build-image --from` (image/prepared.py).
MLGYM_IMAGE = "aigym/mlgym-agent:latest"


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
    package_dir = Path(__file__).resolve().parents[2]  # air/
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


def build_context(recipe_dir: Path | str | None) -> io.BytesIO:
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
