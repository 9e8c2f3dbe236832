"""Under verifiers 0.4.0 (v1 only) the commands that drive the classic front refuse in one line that
says where they run, instead of an AttributeError from deep in the env loader."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rigs.patience import backstop

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("argv", [["standalone", "--steps", "1"], ["replay", "missing.json"]])
def test_classic_only_commands_say_so_in_one_line(argv: list[str], tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "air.cli.main", *argv],
        cwd=tmp_path,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO), "HOME": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=backstop(120),
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("air: error:"), done.stderr
    assert "classic verifiers front" in lines[0] and "verifiers 0.4" in lines[0]
    assert not (tmp_path / "outputs").exists()
