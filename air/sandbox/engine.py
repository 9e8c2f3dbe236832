"""Is the Docker engine there? Its address, a ping that cannot hang, and which failures are its own.

When an engine stops (a package upgrade, a crash, ``systemctl restart docker``) its API socket goes away:
the SDK then raises ``requests.exceptions.ConnectionError`` (not a ``DockerException``), every exec socket
into a container reads end-of-file, and the containers are stopped (``Exited (143)``) and never come back
on their own. ``air.sandbox.pool`` uses what is here to tell that case from one container's death.
"""

from __future__ import annotations

import os

import docker
import docker.errors
import requests.exceptions
import urllib3.exceptions

DEFAULT_ADDRESS = "unix:///var/run/docker.sock"

# What a Docker call raises: the SDK's own errors, and requests' when the engine's socket is gone or hangs.
DOCKER_ERRORS: tuple[type[BaseException], ...] = (docker.errors.DockerException, requests.exceptions.RequestException)

_CONNECTION_ERRORS = (
    requests.exceptions.ConnectionError,
    requests.exceptions.Timeout,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.NewConnectionError,
    ConnectionError,
)


def engine_address() -> str:
    """Where this process's Docker client connects: ``$DOCKER_HOST``, else the default socket."""
    return os.environ.get("DOCKER_HOST") or DEFAULT_ADDRESS


def engine_answers(timeout: float = 5.0) -> bool:
    """One ping on a fresh connection (never a pooled one from before a restart), bounded by ``timeout``."""
    try:
        client = docker.from_env(timeout=max(1, int(timeout)))
    except docker.errors.DockerException:
        return False
    try:
        return bool(client.ping())
    except (*DOCKER_ERRORS, OSError):
        return False
    finally:
        client.close()


def require_engine(timeout: float = 5.0) -> None:
    """EngineAbsent (the address and the fix) at once when no engine answers: for a command before it makes a
    folder, and for a pool before its first container (an engine lost later is the pool's to wait for)."""
    from air.sandbox.errors import EngineAbsent

    if not engine_answers(timeout):
        raise EngineAbsent(absent_message())


def looks_like_engine_failure(exc: BaseException) -> bool:
    """Does ``exc`` (or anything in its chain) say the engine's connection failed? A hint only: the pool
    decides with :func:`engine_answers`."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        if isinstance(current, _CONNECTION_ERRORS):
            return True
        current = current.__cause__ or current.__context__
    return False


def unreachable_message(address: str | None = None) -> str:
    return f"Docker engine unreachable at {address or engine_address()}"


def absent_message(address: str | None = None) -> str:
    """What to say when no engine has answered at all (a first start, not an engine lost under a run)."""
    return (
        f"No Docker engine answers at {address or engine_address()}: start one (`sudo systemctl start docker` or "
        "`sudo dockerd &`), or point DOCKER_HOST at one that runs; `air check` checks the rest of the set-up"
    )
