"""scripts/install_prime_rl.sh, run for real against a local git repository shaped like prime-rl
(GitHub is out of reach here and prime-rl needs CUDA wheels): clone at a commit, uv sync, install
air-agent into its venv, and `air check` from that venv."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
import tomllib
from pathlib import Path

import psutil
import pytest

from rigs.patience import backstop
from tests.git_repo import git

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "install_prime_rl.sh"
# prime-rl asks for 3.12, which this machine may lack; its stand-in asks for what air-agent does, so uv's
# pick for its venv can take the editable air-agent.
AIR_REQUIRES_PYTHON = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]


@pytest.fixture(scope="module")
def fake_prime_rl(tmp_path_factory) -> tuple[Path, str, str]:
    """A two-commit repo with prime-rl's layout; returns (repo, first commit, second commit)."""
    repo = tmp_path_factory.mktemp("upstream") / "prime-rl"
    (repo / "src" / "prime_rl").mkdir(parents=True)
    (repo / "pyproject.toml").write_text(
        '[project]\nname = "prime-rl"\nversion = "0.0.0"\nrequires-python = "' + AIR_REQUIRES_PYTHON + '"\n'
        'dependencies = ["verifiers==0.1.10"]\n'  # prime-rl's venv brings verifiers; air-agent leaves it be
        '[project.scripts]\nrl = "prime_rl.rl:main"\n'
        '[build-system]\nrequires = ["hatchling"]\nbuild-backend = "hatchling.build"\n'
        '[tool.hatch.build.targets.wheel]\npackages = ["src/prime_rl"]\n'
    )
    (repo / "src" / "prime_rl" / "__init__.py").write_text("")
    (repo / "src" / "prime_rl" / "rl.py").write_text(FAKE_RL)
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "v1")
    first = git(repo, "rev-parse", "HEAD")
    (repo / "src" / "prime_rl" / "rl.py").write_text("def main():\n    print('rl v2')\n")
    git(repo, "commit", "-qam", "v2")
    return repo, first, git(repo, "rev-parse", "HEAD")


# Stands in for prime-rl's launcher: leaves a child running (as vLLM workers outlive a crashed `rl`),
# says what it was given, and fails.
FAKE_RL = textwrap.dedent(
    """\
    import json, os, pathlib, subprocess, sys

    def main():
        straggler = subprocess.Popen(["sleep", "300"])
        seen = {"argv": sys.argv[1:], "cwd": os.getcwd(), "uv_project": os.environ.get("UV_PROJECT")}
        seen["straggler"] = straggler.pid
        pathlib.Path(os.environ["FAKE_RL_OUT"]).write_text(json.dumps(seen))
        sys.exit(3)
    """
)


def install(target: Path, repo: Path, commit: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PRIME_RL_DIR")}
    env.update(PRIME_RL_REPO=str(repo), PRIME_RL_COMMIT=commit)
    return subprocess.run(["bash", str(SCRIPT), str(target)], env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(fake_prime_rl, tmp_path_factory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    repo, first, _ = fake_prime_rl
    target = tmp_path_factory.mktemp("home") / "prime-rl"
    return target, install(target, repo, first)


@pytest.mark.timeout(900)
def test_install_clones_at_the_commit_installs_air_and_air_check_sees_it(fake_prime_rl, installed, tmp_path):
    repo, first, _ = fake_prime_rl
    target, done = installed
    assert done.returncode == 0, done.stdout + done.stderr
    assert git(target, "rev-parse", "HEAD") == first  # the pinned commit, not the newest
    assert "air_mlgym imports" in done.stdout
    assert f"recorded: classic: prime-rl {first[:7]} (GPU) at {target}" in done.stdout  # what `uv run rl` uses
    assert "\n  uv run rl @ configs/mlgym/rl.toml\n" in done.stdout
    python = target / ".venv" / "bin" / "python"
    probe = subprocess.run(
        [str(python), "-c", "import air, air_mlgym, prime_rl.rl; print(air.__file__)"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert probe.returncode == 0 and probe.stdout.strip() == str(ROOT / "air" / "__init__.py")  # editable

    again = install(target, repo, first)  # idempotent
    assert again.returncode == 0, again.stderr

    # `air check` from prime-rl's venv finds it (importable), sees the wrong commit, and passes the venv.
    check = subprocess.run(
        [str(target / ".venv" / "bin" / "air"), "check", "--json"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "PRIME_RL_DIR"},
        timeout=backstop(120),
    )
    rows = {r["check"]: r for r in json.loads(check.stdout)}
    assert rows["prime-rl"]["status"] == "fail" and first[:12] in rows["prime-rl"]["detail"]
    assert "c87c19ba8672" in rows["prime-rl"]["detail"] and "checkout c87c19ba8672" in rows["prime-rl"]["fix"]
    assert rows["prime-rl venv"]["status"] == "pass", rows["prime-rl venv"]
    assert check.returncode == 1


def test_install_refuses_to_move_a_checkout_with_local_changes(fake_prime_rl, tmp_path):
    repo, first, second = fake_prime_rl
    target = tmp_path / "prime-rl"
    git(tmp_path, "clone", "-q", str(repo), str(target))  # at the second commit
    (target / "src" / "prime_rl" / "rl.py").write_text("# my local edit\n")
    done = install(target, repo, first)
    assert done.returncode != 0
    assert "has local changes" in done.stderr and second[:12] in done.stderr
    assert git(target, "rev-parse", "HEAD") == second  # untouched


def test_install_names_a_clone_source_that_does_not_exist(tmp_path):
    done = install(tmp_path / "prime-rl", tmp_path / "no-such-repo", "c87c19ba8672")
    assert done.returncode != 0 and "cannot clone" in done.stderr


def test_orchestrator_only_options_and_a_checkout_without_a_lock_file(fake_prime_rl, tmp_path):
    """The CPU route clones at the pin like the full one, then needs prime-rl's uv.lock for versions
    (the fake checkout has none: named). The full route runs against the real mirror in the opt-in
    rehearsal test's set-up (docs/rehearsal.md)."""
    repo, first, _ = fake_prime_rl
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PRIME_RL_DIR")}
    env.update(PRIME_RL_REPO=str(repo), PRIME_RL_COMMIT=first)

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=backstop(300)
        )

    assert "unknown option --orchestrator" in run("--orchestrator").stderr
    assert "one DIR at most" in run("a", "b").stderr
    usage = "[--orchestrator-only | --cpu-trainer | --cpu] [--commit REF] [--archives VENDOR] [DIR]"
    assert usage in run("--help").stdout
    assert "--commit needs a REF" in run("--commit").stderr
    target = tmp_path / "cpu"
    done = run("--orchestrator-only", str(target))
    assert done.returncode != 0 and f"cannot read {target}/uv.lock" in done.stderr
    assert git(target, "rev-parse", "HEAD") == first and not (target / ".venv-cpu").exists()
    trainer = tmp_path / "cpu-trainer"  # --cpu-trainer builds the orchestrator's venv first: the same refusal
    done = run("--cpu-trainer", str(trainer))
    assert done.returncode != 0 and f"cannot read {trainer}/uv.lock" in done.stderr
    assert not (trainer / ".venv-cpu").exists()


def test_install_takes_the_commit_from_the_command_line(fake_prime_rl, tmp_path):
    """--commit REF wins over PRIME_RL_COMMIT; a branch name means the remote's branch; an unknown REF is named."""
    repo, first, second = fake_prime_rl
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PRIME_RL_DIR")}
    env.update(PRIME_RL_REPO=str(repo), PRIME_RL_COMMIT=first)
    target = tmp_path / "prime-rl"

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=backstop(300)
        )

    branch = git(repo, "rev-parse", "--abbrev-ref", "HEAD")
    done = run("--orchestrator-only", "--commit", branch, str(target))  # stops at the missing uv.lock, after checkout
    assert git(target, "rev-parse", "HEAD") == second, done.stdout + done.stderr
    assert "(classic: air_mlgym's classic front, configs in configs/mlgym/)" in done.stdout
    run("--orchestrator-only", f"--commit={first[:10]}", str(target))
    assert git(target, "rev-parse", "HEAD") == first
    done = run("--orchestrator-only", "--commit", "no-such-ref", str(target))
    assert done.returncode != 0 and "cannot find no-such-ref" in done.stderr
    assert git(target, "rev-parse", "HEAD") == first


def run_air(target: Path, argv: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("PRIME_RL_DIR", "MLGYM_ROOT", "VIRTUAL_ENV")}
    return subprocess.run(
        [str(target / ".venv" / "bin" / "air"), *argv],
        cwd=cwd,
        env={**base, "COLUMNS": "200", **env},
        capture_output=True,
        text=True,
        timeout=backstop(300),
    )


@pytest.mark.timeout(600)
def test_air_train_runs_rl_from_anywhere_and_stops_its_leftovers(installed, tmp_path):
    target, done = installed
    assert done.returncode == 0, done.stderr
    work, state, seen_file = tmp_path / "work", tmp_path / "state", tmp_path / "seen.json"
    work.mkdir()
    config = Path(__file__).resolve().parents[2] / "configs" / "mlgym" / "rl_2gpu.toml"
    bystander = subprocess.Popen(["sleep", "300"])  # same name as the straggler, not ours to stop
    try:
        argv = ["train", "--config", str(config), "--prime-rl", str(target), "--no-check", "--grace", "2"]
        result = run_air(
            target, [*argv, "--", "--max-steps", "1"], work, AIR_STATE_DIR=str(state), FAKE_RL_OUT=str(seen_file)
        )
        assert result.returncode == 3, result.stdout + result.stderr
        seen = json.loads(seen_file.read_text())
        assert seen["argv"] == ["@", str(config), "--max-steps", "1"]
        assert seen["cwd"] == str(work) and seen["uv_project"] == str(target)
        assert not psutil.pid_exists(seen["straggler"]) or psutil.Process(seen["straggler"]).status() == "zombie"
        assert "stopping 1 leftover" in result.stdout
        assert bystander.poll() is None  # untouched
        assert not list((state / "processes").glob("*.json"))  # nothing left, so the record is gone
    finally:
        bystander.kill()
        bystander.wait()


def test_air_train_stops_at_a_failed_preflight_before_starting_rl(installed, tmp_path):
    target, done = installed
    assert done.returncode == 0, done.stderr
    seen_file = tmp_path / "seen.json"
    config = Path(__file__).resolve().parents[2] / "configs" / "mlgym" / "rl_debug.toml"  # MLGym's titanic
    result = run_air(
        target,
        ["train", "--config", str(config), "--prime-rl", str(target)],
        tmp_path,
        FAKE_RL_OUT=str(seen_file),
        AIR_STATE_DIR=str(tmp_path / "state"),
    )
    assert result.returncode == 1
    assert "preflight failed" in result.stderr and "MLGYM_ROOT" in result.stdout
    assert not seen_file.exists()  # rl never started
