"""``air build-image --from IMAGE``: an image with MLGym's layout (``aigym/mlgym-agent``) made safe to
evaluate in, derived once from it on this machine without a network.

MLGym's image has no system python3: its only Python is the conda env ``mlgym_generic`` under
``/home/agent``, created as the agent and so the agent's to change. Evaluating with it would run whatever
the agent plants there (a ``.pth`` file, ``sitecustomize``, a replaced binary or shared object) as the
evaluator and as root's runner. And anything under ``/home/agent`` can be renamed away and replaced by the
agent, even a root-owned subfolder. So the prepared image holds the env at ``TRUSTED_ENV``: copied as root
(root-owned, not writable by anyone else), every text file that named the old prefix (the shebangs of
``bin/``, ``.pth`` paths, sysconfig data) and every symlink into it rewritten to the new one; the old path
becomes a symlink to the new, so the agent's own shell keeps working (``pip install --user`` or a venv of
its own: the env itself is read-only to it). Evaluation then uses ``TRUSTED_ENV`` (air/tasks/workspace.py
checks whichever interpreter an image offers before the first rollout, and refuses one the agent can change).

The tag names both inputs, ``air-prepared:<source image id, 12>-<recipe hash, 8>``: a new pull of the source
or a changed recipe gives a new tag; an existing tag is reused. The copy costs the env's size once more in
the derived image (the source's layers keep the original).
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import time
from typing import TYPE_CHECKING

from air.sandbox.image.progress import Progress, as_progress

if TYPE_CHECKING:
    import docker

    from air.sandbox.image.build import BuildResult

PREPARED_REPOSITORY = "air-prepared"
MLGYM_ENV = "/home/agent/miniconda3/envs/mlgym_generic"  # MLGym's conda env, the agent's
TRUSTED_ENV = "/opt/air-python/mlgym_generic"  # where the prepared image holds it, root's

_PREPARE = rf"""#!/bin/bash
# Runs as root once, in the build of the prepared image (air/sandbox/image/prepared.py says why).
set -euo pipefail
src={MLGYM_ENV}
dst={TRUSTED_ENV}
if [ ! -x "$src/bin/python" ] || [ -L "$src" ]; then
  echo "no conda env at $src to prepare (MLGym's layout: a real folder with bin/python)" >&2
  exit 3
fi
for dir in /opt /opt/air-python; do  # root's and closed to others all the way down
  mkdir -p "$dir"; chown root:root "$dir"; chmod 755 "$dir"
done
# Copied as root: root-owned as it is written (no second copy-up by a chown), then closed to writes by others.
cp -a --no-preserve=ownership "$src" "$dst"
chmod -R go-w "$dst"
# Text files that name the old prefix (bin/'s shebangs, .pth paths, sysconfig data) name the new one.
grep -rlIF --null -e "$src" "$dst" | xargs -0 -r sed -i "s|$src|$dst|g"
# Symlinks into the old prefix point into the new one.
find "$dst" -type l -print0 | while IFS= read -r -d '' link; do
  target=$(readlink "$link")
  case "$target" in "$src"|"$src"/*) ln -sfn "$dst${{target#"$src"}}" "$link";; esac
done
rm -rf "$src"
ln -s "$dst" "$src"  # the agent's shell keeps its PATH; evaluation never goes through this link
# Root's own tools in the container (the disk watch's probe) run the python3 on the image's PATH: give it this one.
if ! PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin command -v python3 >/dev/null; then
  install -d -o root -g root -m 755 /usr/local/bin
  ln -s "$dst/bin/python3" /usr/local/bin/python3
fi
left=$(grep -rlaF -e "$src" "$dst" | head -5 || true)
if [ -n "$left" ]; then echo "binary files still naming $src (not used by evaluation's Python):"; echo "$left"; fi
"$dst/bin/python" -I -c 'import sys; print("prepared:", sys.executable, sys.version.split()[0])'
"""

_DOCKERFILE = """\
# air build-image --from: air/sandbox/image/prepared.py
ARG SOURCE_IMAGE
FROM ${SOURCE_IMAGE}
ARG SOURCE_USER=root
ARG SAFE_PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER root
COPY prepare.sh /tmp/air-prepare.sh
RUN bash /tmp/air-prepare.sh && rm -f /tmp/air-prepare.sh
ENV PATH=${SAFE_PATH}
USER ${SOURCE_USER}
"""


def safe_path(path: str) -> str:
    """The image's PATH for every process that does not set its own (root's execs): MLGym's env named at its
    root-owned place, folders under /home and /tmp (the agent's to replace) left out, the system's kept."""
    system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin".split(":")
    kept = []
    for entry in [*filter(None, path.split(":")), *system]:
        if entry == MLGYM_ENV or entry.startswith(MLGYM_ENV + "/"):
            entry = TRUSTED_ENV + entry[len(MLGYM_ENV) :]
        elif not entry.startswith("/") or entry.split("/")[1] in ("home", "tmp", "root", "var"):
            continue
        if entry not in kept:
            kept.append(entry)
    return ":".join(kept)


def prepared_recipe_hash() -> str:
    digest = hashlib.sha256()
    for text in (_DOCKERFILE, _PREPARE):
        digest.update(b"%d:" % len(text.encode()) + text.encode())
    return digest.hexdigest()[:8]


def _context() -> io.BytesIO:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, text in (("Dockerfile", _DOCKERFILE), ("prepare.sh", _PREPARE)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def prepared_tag(client: docker.DockerClient, source: str) -> tuple[str, str]:
    """(the prepared image's tag, the source image's id); the source must be on this machine."""
    from docker.errors import ImageNotFound

    from air.sandbox.image.recipe import ImageBuildError

    try:
        image = client.images.get(source)
    except ImageNotFound:
        raise ImageBuildError(
            f"image {source!r} is not on this machine: `docker pull {source}` (or `docker load` a saved copy) first"
        ) from None
    source_id = image.id.split(":", 1)[-1]
    return f"{PREPARED_REPOSITORY}:{source_id[:12]}-{prepared_recipe_hash()}", image.id


def build_prepared(
    source: str,
    force: bool = False,
    progress: Progress | bool | None = True,
    *,
    client: docker.DockerClient | None = None,
) -> BuildResult:
    """Derive the prepared image from ``source`` unless its tag exists (``force``: rebuild without cache)."""
    from air.sandbox.image.base import get_client, image_exists
    from air.sandbox.image.build import BuildResult, run_build
    from air.sandbox.image.recipe import ImageBuildError

    start = time.monotonic()
    reporter = as_progress(progress)
    try:
        client = client if client is not None else get_client()
        tag, source_id = prepared_tag(client, source)
        if not force and image_exists(client, tag):
            reporter.phase(f"{tag} (from {source}) is up to date")
            return BuildResult(tag=tag, built=False, base_image=source, seconds=time.monotonic() - start)
        config = client.images.get(source).attrs.get("Config") or {}
        user = config.get("User") or "root"
        source_path = next((e[5:] for e in config.get("Env") or [] if e.startswith("PATH=")), "")
        reporter.phase(f"Building {tag} from {source}")
        labels = {
            "air.prepared-from": source,
            "air.source-id": source_id,
            "air.prepared-recipe": prepared_recipe_hash(),
        }
        args = {"SOURCE_IMAGE": source, "SOURCE_USER": user, "SAFE_PATH": safe_path(source_path)}
        image_id = run_build(client, tag, _context(), args, labels, force, reporter)
        if not image_exists(client, tag):
            raise ImageBuildError(f"The build of {tag} finished but the tag is missing")
        seconds = time.monotonic() - start
        reporter.phase(f"Built {tag} in {seconds:.0f}s")
        return BuildResult(tag=tag, built=True, base_image=source, image_id=image_id, seconds=seconds)
    finally:
        reporter.close()
