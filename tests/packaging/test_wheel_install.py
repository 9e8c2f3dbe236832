"""air-mlgym installed the verifiers way: the wheel `uv build` makes of this checkout (what `prime env push`
builds and uploads), installed into a fresh venv of each verifiers generation, and that venv's own `vf-eval`
run by the hub-style name `air-mlgym` from a folder outside the checkout, in a clean environment, against the
scripted policy server of the same venv.

What the name buys, per generation (each test fails for a distribution named otherwise, e.g. air-agent):
- classic (0.1.10): `vf-eval owner/air-mlgym@0.1.0` first asks `uv pip show air_mlgym` whether that version
  is installed, and the results record `importlib.metadata.version("air_mlgym")` as the env's version;
  its loader strips the owner, not the version.
- v1 (0.4.0): the plugin loader strips owner and version (`owner/air-mlgym@0.1.0` imports `air_mlgym`);
  the distribution that provides the module is what `prime env install owner/air-mlgym@0.1.0` checks
  (`uv pip show air-mlgym`, its version).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from collections.abc import Iterator
from pathlib import Path

import docker
import pytest

from air.sandbox.config import LABEL_RUN
from tests.printed_hints import banner_url_and_model, policy_server_banner

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# The name users type (README, the Hub), not read from pyproject.toml: a distribution renamed there must fail.
NAME, MODULE = "air-mlgym", "air_mlgym"  # verifiers imports the id with hyphens as underscores
VERSION = PROJECT["project"]["version"]
HUB_ID = f"owner/{NAME}@{VERSION}"
TOP_LEVEL = {"air", "air_mlgym.py", "simple_env.py", f"{MODULE}-{VERSION}.dist-info"}
ARGS = {"task_configs": ["laneMerge"], "max_turns": 6, "container_cpus": 1.0}
# Variables a program of the venv may see: nothing that points into this checkout (PYTHONPATH, VIRTUAL_ENV,
# uv's project settings) and none of a user's run settings (conftest removes those for the session).
KEPT = ("HOME", "LANG", "LC_ALL", "TMPDIR", "DOCKER_HOST", "DOCKER_CONFIG", "DOCKER_CERT_PATH", "DOCKER_TLS_VERIFY")
KEY_VAR = "AIR_TEST_KEY"


def _uv() -> str:
    uv = shutil.which("uv")
    if uv is None:
        if os.environ.get("CI"):
            pytest.fail("the packaging tests must run in CI: no `uv` on PATH")
        pytest.skip("no `uv` on PATH (https://docs.astral.sh/uv/)")
    assert not Path(uv).resolve().is_relative_to(REPO), f"uv must not come from the checkout: {uv}"
    return uv


def _run(command: list[str], timeout: float, **kwargs) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert done.returncode == 0, f"{command[:4]} failed:\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built as `prime env push` builds it (`uv build --wheel`), into a folder of the test's own."""
    out = tmp_path_factory.mktemp("dist")
    _run([_uv(), "build", "--wheel", "--out-dir", str(out)], timeout=300, cwd=REPO)
    (built,) = out.glob("*.whl")
    return built


def test_the_wheel_holds_the_env_modules_the_package_and_the_image_recipe(wheel: Path) -> None:
    assert wheel.name == f"{MODULE}-{VERSION}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        recipe = archive.read("air/_docker/Dockerfile")
        metadata = archive.read(f"{MODULE}-{VERSION}.dist-info/METADATA").decode()
    assert {name.split("/")[0] for name in names} == TOP_LEVEL, "no tests/, configs/, docs/ or an MLGym checkout"
    assert recipe == (REPO / "docker" / "Dockerfile").read_bytes(), "`air build-image` builds the image tested here"
    tracked = subprocess.run(["git", "ls-files", "air"], capture_output=True, text=True, cwd=REPO, check=True)
    missing = [path for path in tracked.stdout.split() if path not in names]
    assert not missing, f"tracked files of the package left out of the wheel: {missing[:10]}"
    assert not [name for name in names if "__pycache__" in name or name.endswith(".pyc")]
    fields = [line.split(": ", 1) for line in metadata.splitlines() if ": " in line]
    assert ["Name", NAME] in fields and ["Version", VERSION] in fields
    assert {"classic", "v1"} <= {value for key, value in fields if key == "Provides-Extra"}
    verifiers = [value for key, value in fields if key == "Requires-Dist" and value.startswith("verifiers")]
    # Behind extras only: a venv keeps the verifiers it has, and `prime env push` classifies no runtime by
    # itself (it takes `--runtime v0|v1`).
    assert verifiers and all("extra ==" in requirement for requirement in verifiers), verifiers


def _group_pin(group: str) -> str:
    """The verifiers this checkout's own venv of that generation holds (`.venv`, `.venv-v1`)."""
    (pin,) = [req for req in PROJECT["dependency-groups"][group] if req.startswith("verifiers")]
    return pin


def _fresh_venv(root: Path, wheel: Path, extra: str) -> Path:
    """`uv venv` and the wheel with the generation's extra, from PyPI through uv's cache. The v1 extra is
    pinned to the generation tested (0.4.x): by itself uv settles on openai 3.x (from our `openai>=1.40`)
    before verifiers, then backs verifiers off to 0.3.1, which does not cap openai."""
    uv, venv = _uv(), root / f"venv-{extra}"
    # The interpreter these tests run on, by path: asked for "3.11", uv takes the first on PATH, which may be
    # Debian's 3.11.2, below the package's requires-python (3.11.4).
    base = os.path.realpath(getattr(sys, "_base_executable", sys.executable))
    _run([uv, "venv", "--python", base, str(venv)], timeout=120)
    python = venv / "bin" / "python"
    _run([uv, "pip", "install", "--python", str(python), f"{wheel}[{extra}]", _group_pin(extra)], timeout=600)
    return venv


def _clean_env(venv: Path, tmp_path: Path) -> dict[str, str]:
    env = {name: os.environ[name] for name in KEPT if name in os.environ}
    uv_dir = str(Path(_uv()).parent)  # classic verifiers' hub check runs `uv pip show`
    env["PATH"] = os.pathsep.join([str(venv / "bin"), uv_dir, "/usr/local/bin", "/usr/bin", "/bin"])
    env["AIR_STATE_DIR"], env["AIR_CACHE_DIR"] = str(tmp_path / "state"), str(tmp_path / "cache")
    env[KEY_VAR] = "scripted"  # the scripted server checks no key; vf-eval insists on a set variable
    return env


@contextlib.contextmanager
def _policy_server(venv: Path, env: dict[str, str], cwd: Path) -> Iterator[tuple[str, str]]:
    """`air policy-server --port 0` of the venv; its banner's URL and model name."""
    command = [str(venv / "bin" / "air"), "policy-server", "--policy", "improve", "--port", "0"]
    with policy_server_banner(command, env=env, cwd=cwd) as lines:
        yield banner_url_and_model(lines)


# Run by the venv's python in the work folder: where the env comes from and what it resolves there.
PROBE = """
import importlib.metadata, json, air_mlgym
from air.sandbox.config import SandboxConfig
facts = {"module": air_mlgym.__file__, "image": SandboxConfig().resolved_image(),
         "distributions": importlib.metadata.packages_distributions().get("air_mlgym"),
         "verifiers": importlib.metadata.version("verifiers")}
"""
CLASSIC_PROBE = f"""
import verifiers as vf
from verifiers.utils.install_utils import check_hub_env_installed
env = vf.load_environment("owner/{NAME}", task_configs=["laneMerge"])
facts["loaded"] = type(env).__module__ + "." + type(env).__name__
facts["hub_id_installed"] = check_hub_env_installed("{HUB_ID}")
facts["other_version_installed"] = check_hub_env_installed("owner/{NAME}@9.9.9")
try:
    vf.load_environment("{HUB_ID}")
    facts["versioned_id"] = "loads"
except Exception as exc:
    facts["versioned_id"] = type(exc).__name__
print(json.dumps(facts))
"""
V1_PROBE = f"""
from verifiers.v1.utils import loaders
facts["taskset"] = loaders.taskset_class("{HUB_ID}").__name__
facts["env"] = loaders.environment_class("{HUB_ID}").__name__
facts["imported"] = loaders.import_taskset("{HUB_ID}").__file__
print(json.dumps(facts))
"""


def _probe(venv: Path, env: dict[str, str], cwd: Path, tail: str) -> dict:
    done = _run([str(venv / "bin" / "python"), "-c", PROBE + tail], timeout=180, env=env, cwd=cwd)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _check_installed_env(facts: dict, venv: Path, docker_image: str) -> None:
    module = Path(facts["module"]).resolve()
    assert module.is_relative_to(venv.resolve()) and not module.is_relative_to(REPO), module
    assert facts["distributions"] == [NAME], "the hub id's name is the distribution that provides the module"
    assert facts["image"] == docker_image, "the recipe travelled in the wheel and hashes to the tested image"


def _work_folder(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    work.mkdir()
    assert not work.resolve().is_relative_to(REPO)
    return work


def _our_containers(run_id: str) -> list:
    client = docker.from_env()
    return client.containers.list(all=True, filters={"label": f"{LABEL_RUN}={run_id}"}, ignore_removed=True)


def _run_id(tmp_path: Path) -> str:
    return f"pytest-wheel-{os.getpid()}-{tmp_path.name}"


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_classic_vf_eval_runs_air_mlgym_from_the_installed_wheel(
    wheel: Path, docker_image: str, tmp_path: Path
) -> None:
    venv = _fresh_venv(tmp_path, wheel, "classic")
    env, work, run_id = _clean_env(venv, tmp_path), _work_folder(tmp_path), _run_id(tmp_path)
    facts = _probe(venv, env, work, CLASSIC_PROBE)
    _check_installed_env(facts, venv, docker_image)
    assert facts["verifiers"].startswith("0.1.")
    assert facts["loaded"] == "air.env.mlgym_env.MLGymEnv"
    assert facts["hub_id_installed"] and not facts["other_version_installed"]
    assert facts["versioned_id"] != "loads", "classic vf-eval takes `owner/air-mlgym`, not `...@version`"

    args = {**ARGS, "trajectory_dir": str(tmp_path / "trajectories"), "run_id": run_id}
    with _policy_server(venv, env, work) as (url, model):
        command = [str(venv / "bin" / "vf-eval"), NAME, "-b", url, "-m", model, "-k", KEY_VAR]
        _run(command + ["-n", "1", "-r", "2", "-a", json.dumps(args), "-s", "-d"], timeout=600, env=env, cwd=work)
    (results,) = work.glob(f"outputs/evals/{NAME}--{model}/*/results.jsonl")
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(rows) == 2 and all(row["reward"] > 0.1 for row in rows), [row["reward"] for row in rows]
    assert all(row["submitted"] == 1.0 and row["laneMerge/final_score"] > 2.2 for row in rows)
    metadata = json.loads((results.parent / "metadata.json").read_text())
    assert metadata["env_id"] == NAME and metadata["version_info"]["env_version"] == VERSION
    assert len(list((tmp_path / "trajectories").rglob("*.json"))) == 2
    assert _our_containers(run_id) == []


@pytest.mark.docker
@pytest.mark.timeout(900)
def test_v1_vf_eval_runs_air_mlgym_from_the_installed_wheel(wheel: Path, docker_image: str, tmp_path: Path) -> None:
    venv = _fresh_venv(tmp_path, wheel, "v1")
    env, work, run_id = _clean_env(venv, tmp_path), _work_folder(tmp_path), _run_id(tmp_path)
    facts = _probe(venv, env, work, V1_PROBE)
    _check_installed_env(facts, venv, docker_image)
    assert facts["verifiers"].startswith("0.4.")
    assert (facts["taskset"], facts["env"]) == ("MLGymTaskset", "MLGymV1Env")
    assert facts["imported"] == facts["module"], "the hub id imports the installed module"

    out = tmp_path / "evals"
    flags = {
        "--env.taskset.task-configs": json.dumps(ARGS["task_configs"]),
        "--env.taskset.max-turns": str(ARGS["max_turns"]),
        "--env.taskset.container-cpus": str(ARGS["container_cpus"]),
        "--env.taskset.trajectory-dir": str(tmp_path / "trajectories"),
        "--env.taskset.run-id": run_id,
    }
    with _policy_server(venv, env, work) as (url, model):
        command = [str(venv / "bin" / "vf-eval"), NAME, "-m", model, "-n", "1", "-r", "2", "--no-push", "--no-rich"]
        command += ["--client.base-url", url, "--client.api-key-var", KEY_VAR, "-o", str(out)]
        _run(command + [item for flag in flags.items() for item in flag], timeout=600, env=env, cwd=work)
    (traces,) = out.rglob("traces.jsonl")
    episodes = [json.loads(line) for line in traces.read_text().splitlines() if line.strip()]
    assert len(episodes) == 2
    for episode in episodes:
        assert episode["ok"], episode["errors"]
        (trace,) = episode["traces"]
        assert trace["rewards"]["mlgym_reward"]["score"] > 0.1 and trace["metrics"]["submitted"] == 1.0
        assert Path(trace["info"]["trajectory_path"]).is_relative_to(tmp_path / "trajectories")
    (config,) = out.rglob("configs/resolved/eval.json")
    assert json.loads(config.read_text())["env"]["taskset"]["id"] == NAME
    assert _our_containers(run_id) == []
