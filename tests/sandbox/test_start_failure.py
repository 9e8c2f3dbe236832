"""A container that dies before its shell starts: the error says how it ended, and nothing is left."""

from __future__ import annotations

import contextlib

import docker
import docker.errors
import pytest

from air.sandbox.config import SandboxConfig, owner_labels
from air.sandbox.container import Sandbox, container_kwargs
from air.sandbox.errors import SandboxDied
from air.sandbox.removal import remove_stopped_owned
from air.sandbox.shell import Shell
from rigs.patience import backstop
from tests.containers import existing

pytestmark = pytest.mark.docker


async def test_a_container_dead_at_start_says_how_it_ended_and_is_removed(
    sandbox_config: SandboxConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    started: list[str] = []
    real_start = Shell.start

    async def killed_first(self: Shell, cwd: str | None = None) -> None:
        started.append(self._container.id)
        self._container.kill()  # dies between `docker run` and the shell's exec
        await real_start(self, cwd)

    monkeypatch.setattr(Shell, "start", killed_first)
    with pytest.raises(SandboxDied, match=r"its state: exited, exit code 137, OOM-killed False") as died:
        await Sandbox.create(sandbox_config)
    assert "is not running" in str(died.value)
    assert existing(started) == set()


def test_the_restart_clean_up_removes_what_the_restart_stopped_never_a_start_under_way(
    sandbox_config: SandboxConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After an engine restart the pool removes what the restart stopped (exited) or cut off mid-start
    (created before the clean-up looked); a container another start made after it looked, still
    ``created`` for a moment, is not among them."""
    client = docker.from_env()
    kwargs = container_kwargs(sandbox_config, owner_labels(sandbox_config.run_id))
    kwargs.pop("detach")
    made: list = []
    try:
        stopped = client.containers.run(**kwargs, detach=True)
        made.append(stopped)
        stopped.kill()
        stopped.wait(timeout=backstop(30))
        cut_off = client.containers.create(**kwargs)
        made.append(cut_off)
        looked = client.info()["SystemTime"]  # the clean-up reads the engine's clock here ...
        being_started = client.containers.create(**kwargs)  # ... and a start makes one meanwhile
        made.append(being_started)
        monkeypatch.setattr(client, "info", lambda: {"SystemTime": looked})
        assert remove_stopped_owned(client) == 2
        assert existing([stopped.id, cut_off.id, being_started.id]) == {being_started.id}
    finally:
        for container in made:
            with contextlib.suppress(docker.errors.NotFound, docker.errors.APIError):
                container.remove(force=True)
