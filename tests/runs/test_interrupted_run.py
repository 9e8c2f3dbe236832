"""`air standalone` interrupted for real, the way a terminal's Ctrl-C does it (SIGINT to the whole process
group, twice within a moment, as `uv run` forwards it again): before any rollout ended it leaves no
folder; in the middle of a step it leaves a folder whose every file is true. The rollouts cut short are
recorded as cancelled with their cause and no reward, and the summary agrees with the folder.

A scripted agent whose first command sleeps keeps every rollout in flight for seconds, so the signal
lands where the test says without racing the rollouts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from air.env.trajectory_reader import iter_trajectory_paths, load_trajectory
from rigs.patience import backstop

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(400)]


def _start(tmp_path: Path, out: Path, image: str, sleep_s: int, steps: int = 3) -> subprocess.Popen[str]:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([f"sleep {sleep_s}", "validate"]))
    argv = ["standalone", "--steps", str(steps), "--batch-size", "4", "--rollouts-per-example", "2"]
    argv += ["--output-dir", str(out), "--policy", f"script:{script}", "--max-turns", "3"]
    argv += ["--env-arg", f"image={image}", "--env-arg", "container_cpus=1.0"]
    return subprocess.Popen(
        [sys.executable, "-m", "air.cli.main", *argv],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "400", "PYTHONPATH": str(REPO)},  # this checkout's air, wherever it is
        stdout=(tmp_path / "stdout.txt").open("w"),  # a file, read while it runs
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # its own process group: the signal goes to it all, as a terminal's does
    )


def _wait_for(condition, proc: subprocess.Popen[str], what: str, limit_s: float = backstop(240)) -> None:
    deadline = time.monotonic() + limit_s
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"the run ended before {what}: {proc.communicate()}")  # noqa: B023
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"no {what} in {limit_s} s")
        time.sleep(0.1)


def _ctrl_c(proc: subprocess.Popen[str], tmp_path: Path) -> tuple[str, str]:
    os.killpg(proc.pid, signal.SIGINT)
    os.killpg(proc.pid, signal.SIGINT)  # `uv run` forwards the keypress again: still one Ctrl-C
    _, stderr = proc.communicate(timeout=backstop(120))
    stdout = _text(tmp_path / "stdout.txt")
    assert proc.returncode == 130, stdout + stderr
    assert "Traceback" not in stdout + stderr, stderr
    return stdout, stderr


def test_ctrl_c_before_any_rollout_ended_leaves_no_folder(tmp_path: Path, docker_image: str) -> None:
    out = tmp_path / "run"
    proc = _start(tmp_path, out, docker_image, sleep_s=60)
    # "run folder:" is printed once the env is loaded and the agent answers: the rollouts start then, and
    # each one's first command sleeps for a minute.
    _wait_for(lambda: "run folder:" in _text(tmp_path / "stdout.txt"), proc, "start")
    time.sleep(3)
    stdout, _ = _ctrl_c(proc, tmp_path)
    assert not out.exists(), sorted(p.name for p in out.rglob("*"))
    assert "interrupted before any rollout ended: no run folder kept" in stdout


def test_ctrl_c_in_a_step_leaves_only_true_files(tmp_path: Path, docker_image: str) -> None:
    out = tmp_path / "run"
    proc = _start(tmp_path, out, docker_image, sleep_s=20)
    steps_file = out / "steps.jsonl"
    _wait_for(lambda: steps_file.is_file() and steps_file.read_text().count("\n") >= 1, proc, "first step")
    time.sleep(6)  # step 2's rollouts take their containers and start their 20 s sleep
    stdout, _ = _ctrl_c(proc, tmp_path)

    records = [load_trajectory(p) for p in iter_trajectory_paths(out / "trajectories")]
    cut = [r for r in records if r.exit_status == "cancelled"]
    finished = [r for r in records if r.exit_status != "cancelled"]
    assert cut, "step 2 was in flight: its rollouts are recorded as cut short"
    for record in cut:
        assert record.reward is None and record.advantage is None, record
        assert record.error and "interrupted (Ctrl-C)" in record.error and record.step == 2
    for record in finished:
        assert record.reward is not None and record.error is None

    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["steps_run"] == 1
    steps = [json.loads(line) for line in steps_file.read_text().splitlines()]
    assert [s["step"] for s in steps] == [1] and summary["steps"] == steps
    assert summary["rollouts"] == 4 == sum(r.step == 1 for r in finished)
    unfinished = summary["unfinished_step"]
    assert unfinished == {"step": 2, "finished": len(finished) - 4, "cancelled": len(cut)}
    assert summary["trajectories"] == {"finished": len(finished), "cancelled": len(cut), "unreadable": 0}
    assert f"{len(cut)} cut short" in stdout and "interrupted after 1 of 3 steps" in stdout
    assert not list(out.glob(".*.tmp")), "no half-written file is left behind"


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
