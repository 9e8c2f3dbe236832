"""`air standalone` while its Docker engine restarts or goes away for good: the scenario of issue 22, on a
second, real engine (tests/second_engine.py) stopped and started under the running command."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rigs.patience import backstop
from tests.second_engine import SecondEngine


def _no_nan(text: str) -> object:
    def refuse(constant: str) -> object:
        raise AssertionError(f"{constant} in JSON")

    return json.loads(text, parse_constant=refuse)


def _start(engine: SecondEngine, out: Path, run_id: str, steps: int, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "DOCKER_HOST": engine.address, "COLUMNS": "100"}
    argv = [sys.executable, "-m", "air.run_training", "standalone", "--steps", str(steps), "--output-dir", str(out)]
    argv += ["--batch-size", "4", "--rollouts-per-example", "2"]
    argv += ["--env-arg", f"image={engine.image}", "--env-arg", f"run_id={run_id}", *args]
    return subprocess.Popen(argv, env=env, cwd=out.parent, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _wait_for_steps(out: Path, count: int, process: subprocess.Popen[str], timeout: float = backstop(240)) -> None:
    deadline = time.monotonic() + timeout
    steps = out / "steps.jsonl"
    while time.monotonic() < deadline and process.poll() is None:
        if steps.exists() and len(steps.read_text().splitlines()) >= count:
            return
        time.sleep(0.2)
    raise AssertionError(f"{count} step(s) not written; the run: {process.poll()}")


def _run_with_engine_stopped(
    engine: SecondEngine, out: Path, run_id: str, engine_wait: float, back_after_s: float | None, timeout_s: float
) -> tuple[int, str]:
    """`air standalone` for 3 steps; the engine stops 2 s into the second (rollouts are running commands)
    and, with ``back_after_s``, starts again that much later. Returns the exit status and the console."""
    engine.start()
    process = _start(engine, out, run_id, 3, "--env-arg", f"engine_wait={engine_wait:g}")
    try:
        _wait_for_steps(out, 1, process)
        time.sleep(2)
        engine.stop()
        if back_after_s is not None:
            time.sleep(back_after_s)
            engine.start()
        console, _ = process.communicate(timeout=timeout_s)
    finally:
        process.kill()
        engine.start()  # a no-op when it answers
    return process.returncode, console


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_an_engine_restart_masks_at_most_one_step_and_leaves_nothing(
    second_engine: SecondEngine, tmp_path: Path
) -> None:
    out, run_id = tmp_path / "run", f"test-restart-{secrets.token_hex(4)}"
    returncode, console = _run_with_engine_stopped(
        second_engine, out, run_id, engine_wait=180, back_after_s=3, timeout_s=400
    )
    assert returncode == 0, console
    steps = [_no_nan(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2, 3]
    hit = [s["step"] for s in steps if s["masked"]]
    assert len(hit) <= 1, f"more than one step lost rollouts: {hit}"
    assert all(s["masked"] == 0 for s in steps if s["step"] > (hit or [0])[0]), "the steps after it must be whole"
    summary = _no_nan((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["masked"] == sum(s["masked"] for s in steps)
    for cause in summary["masked_causes"]:
        assert cause.startswith(f"Docker engine unreachable at {second_engine.address}"), cause
    masked = [r for p in (out / "trajectories").rglob("*.json") if (r := _no_nan(p.read_text()))["error"]]
    assert len(masked) == summary["masked"]
    for record in masked:  # one line for the cause, the chain beside it
        assert "\n" not in record["error"] and second_engine.address in record["error"]
        assert len(record["error_chain"]) >= 2
    lines = console.splitlines()
    assert "Traceback" not in console and len(lines) < 50, console
    assert any("Docker engine answers again" in line for line in lines), console
    assert second_engine.containers(run_id) == [], "containers of the run were left behind"


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_an_engine_that_does_not_come_back_stops_the_run_and_the_next_run_reaps(
    second_engine: SecondEngine, tmp_path: Path
) -> None:
    out, run_id = tmp_path / "run", f"test-gone-{secrets.token_hex(4)}"
    returncode, console = _run_with_engine_stopped(
        second_engine, out, run_id, engine_wait=5, back_after_s=None, timeout_s=300
    )
    assert returncode == 1, console
    errors = [line for line in console.splitlines() if line.startswith("air: error:")]
    assert len(errors) == 1 and f"Docker engine unreachable at {second_engine.address}" in errors[0], console
    assert "Traceback" not in console and len(console.splitlines()) < 50, console
    summary = _no_nan((out / "summary.json").read_text())
    assert summary["status"] == "stopped" and summary["steps_run"] < 3 and "engine_wait" in summary["stopped_by"]
    # The engine kept the containers it stopped (their removal failed while it was away); the next run's
    # pool removes them when it starts, as their owner is dead.
    assert second_engine.containers(run_id)
    reap = [sys.executable, "-c", "from air.sandbox.removal import reap_orphans; reap_orphans()"]
    subprocess.run(reap, env={**os.environ, "DOCKER_HOST": second_engine.address}, check=True, timeout=backstop(120))
    assert second_engine.containers(run_id) == []
