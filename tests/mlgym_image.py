"""A stand-in for MLGym's image (``aigym/mlgym-agent``, which cannot be pulled here), built on our sandbox
image with its layout: no system python3; the only Python a conda-like env at
/home/agent/miniconda3/envs/mlgym_generic owned by the agent (Debian's python3.11 binary, its stdlib and
dist-packages copied there, so it runs standalone), with one console script whose shebang names the env, and
the env first on the image's PATH.
Built once and cached by a tag over this recipe and the sandbox image's id."""

from __future__ import annotations

import hashlib
import io
import tarfile

MLGYM_ENV = "/home/agent/miniconda3/envs/mlgym_generic"

_DOCKERFILE = f"""\
ARG BASE
FROM ${{BASE}}
USER root
RUN set -eux; env={MLGYM_ENV}; \\
    mkdir -p "$env/bin" "$env/lib"; \\
    cp /usr/bin/python3.11 "$env/bin/python3.11"; \\
    ln -s python3.11 "$env/bin/python3"; ln -s python3.11 "$env/bin/python"; \\
    cp -a /usr/lib/python3.11 "$env/lib/python3.11"; \\
    site="$env/lib/python3.11/site-packages"; rm -rf "$env/lib/python3.11/dist-packages"; mkdir "$site"; \\
    cp -a /usr/lib/python3/dist-packages/. /usr/lib/python3.11/dist-packages/. "$site/"; \\
    ln -s site-packages "$env/lib/python3.11/dist-packages"; \\
    printf '#!%s/bin/python3.11\\nimport sys\\nprint("tool on", sys.executable)\\n' "$env" > "$env/bin/air-tool"; \\
    chmod 755 "$env/bin/air-tool"; \\
    chown -R agent:agent /home/agent/miniconda3; \\
    rm -rf /usr/bin/python3* /usr/local/bin/python /usr/lib/python3.11 /usr/lib/python3; \\
    ! command -v python3; \\
    "$env/bin/python" -c 'import numpy, pandas, sklearn, site; print(site.getsitepackages())'
ENV PATH={MLGYM_ENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
USER agent
"""
# Debian's site.py looks for dist-packages under a prefix other than /usr: the symlink above gives it the
# env's site-packages, where MLGym's conda Python looks.


def standin_image(base: str) -> str:
    """The stand-in's tag, built from ``base`` (our sandbox image) unless it exists."""
    import docker

    client = docker.from_env(timeout=600)
    base_id = client.images.get(base).id
    digest = hashlib.sha256((_DOCKERFILE + base_id).encode()).hexdigest()[:12]
    tag = f"air-test-mlgym-standin:{digest}"
    try:
        client.images.get(tag)
        return tag
    except docker.errors.ImageNotFound:
        pass
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = _DOCKERFILE.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    buf.seek(0)
    log = []
    for event in client.api.build(
        fileobj=buf, custom_context=True, tag=tag, buildargs={"BASE": base}, rm=True, pull=False, decode=True
    ):
        log.append(str(event.get("stream") or event.get("error") or ""))
        if "error" in event:
            raise RuntimeError(f"building the MLGym stand-in failed: {event['error']}\n{''.join(log[-30:])}")
    client.images.get(tag)
    return tag


def prepared_standin_image(base: str) -> str:
    """The stand-in made safe by ``air build-image --from`` (the form in which evaluation accepts it)."""
    from air.sandbox.image.prepared import build_prepared

    return build_prepared(standin_image(base), progress=False).tag
