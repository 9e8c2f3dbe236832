"""A container that dies before its shell starts: the error says how it ended, and nothing is left."""

from __future__ import annotations

import pytest

from air.sandbox.config import SandboxConfig
from air.sandbox.container import Sandbox
from air.sandbox.errors import SandboxDied
from air.sandbox.shell import Shell
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
