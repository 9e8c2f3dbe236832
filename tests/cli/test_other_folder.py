"""`air` from another folder: `uv run air` finds the project only in the checkout (uv: "Failed to spawn: air").
The README and set-up's last lines name the two ways that work from anywhere, and both do."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from rigs.patience import backstop

ROOT = Path(__file__).resolve().parents[2]


def _clean_env() -> dict[str, str]:
    # A user's exported variables never change the outcome (UV_PROJECT_ENVIRONMENT would point uv elsewhere).
    drop = ("AIR_", "MLGYM_", "UV_PROJECT", "VIRTUAL_ENV")
    return {k: v for k, v in os.environ.items() if not k.startswith(drop)}


def _lists_the_tasks(result: subprocess.CompletedProcess[str]) -> None:
    assert result.returncode == 0, result.stdout + result.stderr
    for name in ("laneMerge", "loanDefault", "buildingEnergy"):
        assert name in result.stdout


def test_the_readme_names_both_ways_and_setup_prints_them() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "uv run --project ~/air-agent air tasks" in readme
    assert "ln -s ~/air-agent/.venv/bin/air ~/.local/bin/air" in readme
    setup = (ROOT / "scripts" / "setup.sh").read_text()
    assert "uv run --project $PWD air" in setup and "ln -s $PWD/.venv/bin/air" in setup


@pytest.mark.skipif(shutil.which("uv") is None, reason="uv is not on PATH")
def test_uv_run_with_the_project_works_from_another_folder(tmp_path: Path) -> None:
    result = subprocess.run(
        ["uv", "run", "--project", str(ROOT), "air", "tasks"],
        cwd=tmp_path,
        env=_clean_env(),
        capture_output=True,
        text=True,
        timeout=backstop(300),
    )
    _lists_the_tasks(result)


def test_the_venv_script_works_from_another_folder_through_a_link(tmp_path: Path) -> None:
    script = ROOT / ".venv" / "bin" / "air"
    if not script.exists():
        pytest.skip(f"{script} is not there (no `uv sync` in this checkout)")
    link = tmp_path / "bin" / "air"
    link.parent.mkdir()
    link.symlink_to(script)
    result = subprocess.run(
        [str(link), "tasks"], cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=backstop(120)
    )
    _lists_the_tasks(result)
