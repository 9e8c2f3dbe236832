"""One recorded `air standalone` run for the tests that only read what a run leaves (the main job's shape:
laneMerge, the noisy policy, 2 steps of 4 rollouts in groups of 2): made once per session instead of once
per test. Tests using it share an xdist group, so one worker makes it."""

from __future__ import annotations

import json
import secrets
from pathlib import Path

import pytest

from air.cli.main import main

RECORDED_RUN_ARGV = ["standalone", "--task", "laneMerge", "--steps", "2", "--batch-size", "4"]
RECORDED_RUN_ARGV += ["--rollouts-per-example", "2", "--policy", "noisy", "--env-arg", "container_cpus=1.0"]


def recorded_run_argv(out: Path) -> list[str]:
    """The recorded run's command line into ``out``, under the secret its folder keeps beside it (a run made
    again with the same secret draws the same evaluation seeds: env.seeds)."""
    secret = out.parent / "evaluation.secret"
    if not secret.exists():
        secret.write_text(secrets.token_hex(32))
        secret.chmod(0o600)
    return [
        *RECORDED_RUN_ARGV,
        "--output-dir",
        str(out),
        "--env-arg",
        f"evaluation_secret_file={json.dumps(str(secret))}",
    ]


@pytest.fixture(scope="session")
def recorded_run(tmp_path_factory: pytest.TempPathFactory, docker_image: str) -> Path:
    out = tmp_path_factory.mktemp("recorded") / "run"
    assert main([*recorded_run_argv(out), "--env-arg", f"image={docker_image}"]) == 0
    return out
