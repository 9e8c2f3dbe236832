"""The `air` command line as a user runs it (a subprocess, from an unrelated directory)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from rigs.patience import backstop


def air(*args: str, cwd) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "air.run_training", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=backstop(300),
    )


def test_tasks_lists_the_builtin_tasks_from_any_directory(tmp_path) -> None:
    result = air("tasks", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    for name in ("laneMerge", "loanDefault", "buildingEnergy"):
        assert name in result.stdout


def test_a_bad_task_root_is_one_clear_line(tmp_path) -> None:
    result = air("tasks", "--task-root", str(tmp_path / "nowhere"), cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr.startswith("air: error: Task root") and "Traceback" not in result.stderr


def test_unknown_task_in_demo_lists_known_ones(tmp_path) -> None:
    result = air("demo", "--task", "titanic", cwd=tmp_path)
    assert result.returncode == 1 and "Known tasks: buildingEnergy, laneMerge, loanDefault" in result.stderr


@pytest.mark.docker
def test_demo_reproduces_a_baseline(docker_image: str, tmp_path) -> None:
    result = air("demo", "--task", "loanDefault", "--image", docker_image, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "loanDefault" in result.stdout and "0.8075" in result.stdout and "reproduced" in result.stdout
