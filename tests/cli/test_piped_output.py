"""Output piped to a file or another program (no terminal, no $COLUMNS): rich would assume 80 columns and
break lines mid-phrase and mid-word; every line comes out whole instead, and $COLUMNS is still obeyed."""

from __future__ import annotations

import io
import subprocess
import sys
from pathlib import Path

from rich.table import Table

from rigs.patience import backstop
from tests.printed_hints import REPO, env_without


def test_air_standalone_piped_keeps_its_long_lines_whole(tmp_path: Path) -> None:
    folder = tmp_path / ("a-run-folder-whose-name-goes-on-and-on-" * 3)
    command = [sys.executable, "-m", "air.run_training", "standalone", "--env", "simple_env", "--steps", "1"]
    command += ["--batch-size", "2", "--rollouts-per-example", "2", "--output-dir", str(folder)]
    done = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=backstop(300),
        cwd=REPO,
        env=env_without("COLUMNS", "FORCE_COLOR"),
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "air standalone: 1 steps x 2 rollouts (groups of 2) on dial against scripted policy 'noisy'" in lines
    assert f"run folder: {folder}" in lines
    (step,) = [line for line in lines if line.startswith("step   1  reward")]
    assert "validates/rollout" in step and step.endswith(" s")
    assert any("┃ step ┃ reward mean ┃ reward std ┃ zero-adv groups ┃ validates/rollout ┃" in line for line in lines)
    assert any(line.endswith(f"outputs in {folder} (run.log, steps.jsonl, summary.json)") for line in lines)


def test_a_piped_console_obeys_columns(monkeypatch) -> None:
    from air.cli.console import output_console

    monkeypatch.setenv("COLUMNS", "40")
    out = io.StringIO()
    console = output_console(file=out)
    table = Table()
    table.add_column("a column of words")
    table.add_row("words " * 20)
    console.print(table)
    console.print("a printed line " * 10)
    lines = out.getvalue().splitlines()
    assert max(len(line) for line in lines[:-1]) <= 40  # the table fits $COLUMNS
    assert lines[-1].rstrip() == ("a printed line " * 10).rstrip()  # a printed line is never broken
