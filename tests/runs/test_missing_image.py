"""A missing sandbox image stops a run at its first rollout with the fix named, once: `air standalone`,
`air demo`, `air replay`, and a plain verifiers run_group (what vf-eval and prime-rl call) alike.
Real Docker engine, an image tag that does not exist."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from air.sandbox.config import SandboxConfig
from air.sandbox.errors import SandboxImageMissing
from air.sandbox.pool import SandboxPool
from rigs.patience import backstop
from tests.env.test_trajectories import make_record

MISSING = "air-sandbox:no-such-recipe-0000"
FIX = "uv run air build-image"


def air(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "air.run_training", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=backstop(240),
    )


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_standalone_stops_before_any_rollout_naming_the_fix(tmp_path: Path, docker_image: str) -> None:
    out = tmp_path / "run"
    result = air("standalone", "--env-arg", f"image={MISSING}", "--steps", "2", "--output-dir", str(out), cwd=tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.count(FIX) == 1 and MISSING in result.stderr, result.stderr
    assert "Traceback" not in result.stderr
    assert not out.exists(), "a run that could not start records nothing, and leaves no folder behind"


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_demo_stops_naming_the_fix(tmp_path: Path, docker_image: str) -> None:
    result = air("demo", "--image", MISSING, cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("air: error:") and FIX in result.stderr and MISSING in result.stderr


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_replay_stops_naming_the_fix(tmp_path: Path, docker_image: str) -> None:
    from air.env.trajectories import write_trajectory
    from air.runs.replay import ReplayError, replay_trajectory

    record = make_record(task="laneMerge", task_id="laneMerge", source="air", task_root=None)
    path = write_trajectory(record, tmp_path / "recorded")
    with pytest.raises(ReplayError, match="build-image") as info:
        await replay_trajectory(path, image=MISSING)
    assert MISSING in str(info.value)


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_a_verifiers_group_raises_instead_of_masking_every_rollout(tmp_path: Path, docker_image: str) -> None:
    """vf-eval and prime-rl's workers call run_group: a vf.Error would be recorded per rollout and the run
    would go on; the missing image must escape verifiers instead."""
    from air.policies.scripted import make_policy
    from tests.rollouts import make_env, run_group

    env = make_env(tmp_path, MISSING, task_configs=["laneMerge"], max_turns=2)
    with pytest.raises(SandboxImageMissing, match="build-image"):
        await run_group(env, make_policy("baseline"), "laneMerge", n=2)


@pytest.mark.docker
async def test_the_pool_asks_once_then_fails_every_acquire_at_once(docker_image: str) -> None:
    pool = SandboxPool(SandboxConfig(image=MISSING, run_id="pytest"), size=2)
    with pytest.raises(SandboxImageMissing):
        await pool.acquire()
    assert pool.ready_count == 0 and not pool._tasks  # nothing was started to refill
    with pytest.raises(SandboxImageMissing):
        await pool.acquire()
    await pool.close()


def test_a_missing_image_that_is_not_ours_is_not_sent_to_build_image() -> None:
    from air.sandbox.errors import image_missing
    from air.sandbox.image.recipe import default_image_tag

    foreign = str(image_missing("aigym/mlgym-agent:latest"))
    assert "docker pull aigym/mlgym-agent:latest" in foreign and "--image" in foreign
    assert f"builds this project's image, {default_image_tag()!r}, not this one" in foreign
    ours = str(image_missing(default_image_tag()))
    assert "build it with `uv run air build-image`" in ours and "docker pull" not in ours
