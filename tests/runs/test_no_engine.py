"""No Docker engine at all is one line at once, with the fix: `air standalone` before it makes a folder, and
`air demo`, `air replay` and the pool itself (vf-eval, env servers) at the first rollout. Before, a pool
that never reached an engine took it for one lost mid-run and waited engine_wait_s (300 s) for it."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from air.sandbox.config import SandboxConfig
from air.sandbox.errors import EngineAbsent
from air.sandbox.pool import SandboxPool

NO_ENGINE = "unix:///nonexistent/air-test-docker.sock"
SAID = f"No Docker engine answers at {NO_ENGINE}"

# Fails (on the code before) by timing out here rather than after the pool's 300 s wait.
WAIT_S = 120


def _air(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIR_", "DOCKER_", "MLGYM_"))}
    env["DOCKER_HOST"] = NO_ENGINE
    return subprocess.run(
        [sys.executable, "-m", "air.run_training", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
    )


def _one_line_with_the_fix(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 1, result.stdout + result.stderr
    errors = [line for line in result.stderr.splitlines() if "error" in line.lower()]
    assert len(errors) == 1, result.stderr
    [line] = errors
    assert SAID in line and "dockerd" in line and "DOCKER_HOST" in line, line
    assert "Traceback" not in result.stderr and "stopped answering" not in result.stderr, result.stderr
    return line


def test_standalone_says_so_before_it_makes_a_folder(tmp_path: Path) -> None:
    result = _air("standalone", "--steps", "1", "--output-dir", str(tmp_path / "run"), cwd=tmp_path)
    line = _one_line_with_the_fix(result)
    assert line.startswith("air: error: air standalone:"), line
    assert not (tmp_path / "run").exists(), "a refused start makes no folder"


def test_demo_says_so_at_the_first_task(tmp_path: Path) -> None:
    _one_line_with_the_fix(_air("demo", "--task", "laneMerge", cwd=tmp_path))


def test_replay_says_so(tmp_path: Path) -> None:
    # A recording is read before any container: a made-up one with a command is enough to reach the pool.
    from datetime import UTC, datetime

    from air.env.trajectories import BaselineInfo, TrajectoryRecord, Turn

    turn = Turn(index=1, model_text="```bash\nls\n```", command="ls")
    record = TrajectoryRecord(
        id="ab12",
        task="laneMerge",
        started_at=datetime.now(UTC),
        exit_status="max_turns",
        baseline=BaselineInfo(metric="Score", score=2.1),
        turns=[turn],
    )
    path = tmp_path / "run.json"
    path.write_text(record.model_dump_json())
    _one_line_with_the_fix(_air("replay", str(path), cwd=tmp_path))


def test_a_pool_that_never_reached_an_engine_fails_its_first_acquire_at_once(monkeypatch) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)

    async def first_acquire() -> None:
        pool = SandboxPool(SandboxConfig(run_id="no-engine"), size=1)
        try:
            await asyncio.wait_for(pool.acquire(), WAIT_S)
        finally:
            await pool.close()

    with pytest.raises(EngineAbsent, match="No Docker engine answers at unix:///nonexistent"):
        asyncio.run(first_acquire())
