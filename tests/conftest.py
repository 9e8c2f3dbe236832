"""Shared fixtures. Docker tests skip with a reason on a user's machine; in CI (CI set) a missing
engine or image fails the run instead, so the Docker tests can never silently not run there.

Hermetic: the variables a user exports for real runs (MLGYM_ROOT, AIR_IMAGE, ...) are removed for the
whole session, subprocesses included, so they never change an outcome. The opt-in checkout tests read
their own copy of MLGYM_ROOT (tests/opt_in.py, captured before the removal) and pass it explicitly.
"""

from __future__ import annotations

import importlib.util
import os
import signal
from pathlib import Path

import pytest

from air.sandbox.config import SandboxConfig
from tests import opt_in  # noqa: F401  (captures the opt-in checkouts before the variables go)
from tests.second_engine import quota_engine, second_engine  # noqa: F401  (fixtures)

# A suite started from a script's background job inherits SIGINT ignored, and so does every program it starts:
# the tests that press Ctrl-C on one then wait in vain. Restore what a terminal gives (exec resets a handler
# to the default, where an ignored signal stays ignored).
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Variables that choose what a run uses (task root, image, prime-rl, the viewer's folder, state, W&B).
USER_VARIABLES = (
    "MLGYM_ROOT",
    "MLGYM_CONFIG_ROOT",
    "AIR_IMAGE",
    "AIR_TRAJECTORY_DIR",
    "AIR_STATE_DIR",
    "XDG_STATE_HOME",
    "AIR_CACHE_DIR",
    "PRIME_RL_DIR",
    "OPENAI_API_KEY",
    "WANDB_API_KEY",
    "WANDB_PROJECT",
    "WANDB_NAME",
    "WANDB_MODE",
    "WANDB_DIR",
)
for _name in USER_VARIABLES:
    os.environ.pop(_name, None)

# One environment holds one generation of verifiers (pyproject: the classic and v1 groups conflict).
# `.venv` (classic) runs everything but tests/v1/; `.venv-v1` (verifiers 0.4.0) runs tests/v1/ and the
# architecture test. scripts/test.sh runs both.
V1_ONLY = importlib.util.find_spec("verifiers") is not None and importlib.util.find_spec("verifiers.envs") is None
HERE = Path(__file__).parent
if V1_ONLY:
    collect_ignore = [str(p) for p in HERE.iterdir() if p.name not in {"v1", "test_architecture.py", "__init__.py"}]
else:
    collect_ignore = [str(HERE / "v1")]


def _docker_problem() -> tuple[str | None, str]:
    try:
        import docker

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # any failure to reach the engine is a reason to skip
        return f"no Docker engine answers ({type(exc).__name__}: {exc})", ""
    image = SandboxConfig().resolved_image()
    try:
        client.images.get(image)
    except Exception:
        return f"sandbox image {image} is missing: run `uv run air build-image`", image
    return None, image


@pytest.fixture(scope="session")
def docker_image() -> str:
    problem, image = _docker_problem()
    if problem:
        if os.environ.get("CI"):
            pytest.fail(f"Docker tests must run in CI: {problem}")
        pytest.skip(problem)
    return image


@pytest.fixture
def sandbox_config(docker_image: str) -> SandboxConfig:
    return SandboxConfig(image=docker_image, run_id="pytest", cpus=1.0, memory="1g")


@pytest.fixture
async def sandbox(sandbox_config: SandboxConfig):
    from air.sandbox.container import Sandbox

    sb = await Sandbox.create(sandbox_config)
    try:
        yield sb
    finally:
        await sb.destroy()


@pytest.fixture(autouse=True)
def air_state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test reads or writes the user's own process records (~/.local/state/air)."""
    monkeypatch.setenv("AIR_STATE_DIR", str(tmp_path / "state"))
    return tmp_path / "state"


@pytest.fixture(autouse=True)
def air_cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """No test marks the user's Docker engine as told about its missing disk quota (~/.cache/air/engines)."""
    monkeypatch.setenv("AIR_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium for the browser tests: skipped on a machine without it, a failure in CI."""
    from tests.viewer_server import chromium_path

    found = chromium_path()
    if found is None:
        problem = "no Chromium found (apt-get install chromium, or set AIR_CHROMIUM)"
        if os.environ.get("CI"):
            pytest.fail(f"browser tests must run in CI: {problem}")
        pytest.skip(problem)
    return found


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model written once per session (``air tiny-model``): skipped on a machine without the
    ``tiny`` extra, a failure in CI, where the extra is installed."""
    from air.inference.tiny_model import TinyModelError, require_extra, write_tiny_model

    try:
        require_extra()
    except TinyModelError as exc:
        if os.environ.get("CI"):
            pytest.fail(f"the tiny-model tests must run in CI: {exc}")
        pytest.skip(str(exc))
    return write_tiny_model(tmp_path_factory.mktemp("tiny-model"))
