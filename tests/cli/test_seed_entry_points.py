"""The original project's entry points still work: ``python -m air.run_training``, and its standalone
command ``python -m air.prime_orchestrator`` against a model served by hand (here the real scripted
OpenAI-compatible server on loopback, given as --base-url as a vLLM server would be)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from air.policies.scripted import make_policy
from air.prime_orchestrator import DEFAULT_BASE_URL, build_parser, standalone_argv
from air.serving.server import PolicyServer
from rigs.patience import backstop


def python_m(module: str, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", module, *args], capture_output=True, text=True, cwd=cwd, timeout=backstop(300)
    )


@pytest.mark.parametrize("module", ["air.prime_orchestrator", "air.run_training"])
def test_help_works_from_any_directory(module: str, tmp_path: Path) -> None:
    result = python_m(module, "--help", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


def test_the_seed_flags_map_onto_air_standalone() -> None:
    args = build_parser().parse_args(
        ["--task", "battleOfSexes", "--model", "Qwen/Qwen3-4B", "--num-steps", "10", "--batch-size", "16"]
    )
    argv = standalone_argv(args)
    assert argv[0] == "standalone"
    pairs = dict(zip(argv[1::2], argv[2::2], strict=False))
    assert pairs["--base-url"] == DEFAULT_BASE_URL == "http://localhost:8000/v1"
    assert pairs["--model"] == "Qwen/Qwen3-4B" and pairs["--task"] == "battleOfSexes"
    assert pairs["--steps"] == "10" and pairs["--batch-size"] == "16"


def test_a_missing_model_is_a_usage_error(tmp_path: Path) -> None:
    result = python_m("air.prime_orchestrator", "--task", "laneMerge", cwd=tmp_path)
    assert result.returncode == 2 and "--model" in result.stderr


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_the_seed_standalone_command_runs_against_a_served_model(tmp_path: Path, docker_image: str) -> None:
    out = tmp_path / "run"
    with PolicyServer(make_policy("improve"), model_name="served-by-hand") as server:
        result = python_m(
            "air.prime_orchestrator",
            *("--task", "laneMerge", "--model", "served-by-hand", "--base-url", server.base_url),
            *("--num-steps", "1", "--batch-size", "2", "--rollouts-per-example", "2", "--output-dir", str(out)),
            cwd=tmp_path,
        )
        served = server.app.requests_served  # the run used this server, not an in-process one
    assert result.returncode == 0, result.stdout + result.stderr
    summary = json.loads((out / "summary.json").read_text())
    assert summary["base_url"] == server.base_url and summary["model"] == "served-by-hand"
    assert summary["rollouts"] == 2 and summary["masked"] == 0 and len(summary["steps"]) == 1
    assert len(list((out / "trajectories").rglob("*.json"))) == 2
    assert served >= 2  # at least one reply per rollout
