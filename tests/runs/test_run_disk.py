"""The disk under a standalone run's folder, on real small and read-only filesystems (tmpfs mounts, so
root only: the tests skip with the reason elsewhere): refused before the run when it cannot be written or
has no room, and a disk that fills during the run stops it once, its files whole, with one line saying
where, never logging's tracebacks."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from air.runs.run_log import console_lines, log_file
from rigs.patience import backstop
from tests.runs.counted_imports import standalone_counting_imports


@contextlib.contextmanager
def _tmpfs(where: Path, options: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a small or read-only tmpfs needs root")
    where.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(where)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode().strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], check=True)


def _fill(folder: Path) -> None:
    """Write a file until the disk refuses: what is left is nothing."""
    with (folder / "filler").open("wb", buffering=0) as handle, contextlib.suppress(OSError):
        while True:
            handle.write(b"\0" * 4096)


@pytest.mark.parametrize("inside", [True, False])
def test_a_read_only_output_dir_is_one_line_before_the_run_starts(tmp_path: Path, inside: bool) -> None:
    with _tmpfs(tmp_path / "ro", "ro,size=1m") as ro:
        target = ro / "run" if inside else ro  # a folder to make there, or the empty mount itself
        out = standalone_counting_imports("--env", "simple_env", "--output-dir", str(target), cwd=tmp_path)
    lines = out["err"].strip().splitlines()
    assert out["code"] == 1 and len(lines) == 1, out["err"]
    assert lines[0].startswith(f"air: error: output folder {target} cannot be written: Read-only file system")
    assert "--output-dir" in lines[0]
    assert out["heavy"] == [], "the folder is checked before the env's stack is imported"


def test_a_disk_without_room_is_refused_naming_its_free_space(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "small", "size=1m") as small:
        out = standalone_counting_imports("--env", "simple_env", "--output-dir", str(small / "run"), cwd=tmp_path)
        left = sorted(p.name for p in small.iterdir())
    lines = out["err"].strip().splitlines()
    assert out["code"] == 1 and len(lines) == 1, out["err"]
    assert f"output folder {small / 'run'} has " in lines[0] and "free on its disk" in lines[0], lines[0]
    assert out["heavy"] == [] and left == [], f"the refused run left {left}"


def test_a_disk_that_fills_during_the_run_stops_it_once_with_its_files_whole(tmp_path: Path) -> None:
    with _tmpfs(tmp_path / "disk", "size=8m") as disk:
        run = disk / "run"
        proc = subprocess.Popen(
            [sys.executable, "-m", "air.cli.main", "standalone", "--env", "simple_env", "--steps", "500"]
            + ["--batch-size", "2", "--rollouts-per-example", "2", "--output-dir", str(run)],
            cwd=tmp_path,
            env={**os.environ, "COLUMNS": "400"},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        steps = run / "steps.jsonl"

        def fill_after_the_first_step() -> None:
            while proc.poll() is None and not (steps.is_file() and steps.stat().st_size):
                threading.Event().wait(0.05)
            _fill(disk)

        filler = threading.Thread(target=fill_after_the_first_step)
        filler.start()
        _, stderr = proc.communicate(timeout=backstop(300))
        filler.join()
        lines = steps.read_text().splitlines()
        summary = run / "summary.json"
        summary_text = summary.read_text() if summary.exists() else None
        leftovers = [p.name for p in run.iterdir() if p.name.endswith(".tmp") or p.name.startswith(".")]
    assert proc.returncode == 1, stderr
    assert "Traceback" not in stderr and "Logging error" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("air: error:")]
    assert len(errors) == 1 and f"the disk under {run} refused a write (No space left on device" in errors[0], stderr
    assert "--output-dir" in errors[0]
    assert 1 <= len(lines) < 500, "the run stopped when the disk filled"
    assert [json.loads(line)["step"] for line in lines] == list(range(1, len(lines) + 1)), "every line whole"
    assert summary_text is None or json.loads(summary_text)["steps_run"] == len(lines)
    assert leftovers == [], f"half-written files left: {leftovers}"


def test_run_log_on_a_full_disk_says_so_once(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = logging.getLogger("air.test_run_disk")
    with _tmpfs(tmp_path / "disk", "size=64k") as disk:
        path = disk / "run.log"
        path.touch()
        _fill(disk)
        with console_lines(), log_file(path):
            for i in range(50):
                log.info("line %d of a run that goes on: %s", i, "x" * 200)
    err = capsys.readouterr().err
    assert "Logging error" not in err and "Traceback" not in err, err
    notices = [line for line in err.splitlines() if "run.log cannot be written" in line]
    assert len(notices) == 1 and "No space left on device" in notices[0], err


def test_a_line_that_does_not_fit_is_taken_back_whole(tmp_path: Path) -> None:
    from air.runs.run_disk import WholeLines

    with _tmpfs(tmp_path / "disk", "size=64k") as disk:
        path = disk / "steps.jsonl"
        with WholeLines(path) as lines:
            lines.append('{"step": 1}')
            _fill(disk)
            with pytest.raises(OSError, match="No space left on device") as raised:
                lines.append(json.dumps({"step": 2, "pad": "x" * 20000}))
        assert raised.value.filename == str(path)
        assert path.read_text() == '{"step": 1}\n'
