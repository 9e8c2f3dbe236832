"""Build the sandbox image that agent rollouts run in (the recipe is ``recipe``, the base ``base``).

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

import dataclasses
import io
import time
from collections import deque
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import docker
from air.sandbox.image.base import get_client, image_exists, resolve_base
from air.sandbox.image.progress import Progress, as_progress, one_line
from air.sandbox.image.recipe import IMAGE_REPOSITORY, RECIPE_LABEL, ImageBuildError, build_context, recipe_hash

BaseMode = Literal["auto", "registry", "debootstrap"]


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


def run_build(
    client: docker.DockerClient,
    tag: str,
    context: io.BytesIO,
    buildargs: dict[str, str],
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
            fileobj=context,
            custom_context=True,
            tag=tag,
            buildargs=buildargs,
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
        error = one_line(exc)
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
    reporter = as_progress(progress)
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
        context = build_context(recipe_dir)
        image_id = run_build(client, tag, context, {"BASE_IMAGE": base_image}, labels, force, reporter)
        if not image_exists(client, tag):
            raise ImageBuildError(f"The build of {tag} finished but the tag is missing")
        seconds = time.monotonic() - start
        reporter.phase(f"Built {tag} in {seconds:.0f}s")
        return BuildResult(tag=tag, built=True, base_image=base_image, image_id=image_id, seconds=seconds)
    finally:
        reporter.close()
