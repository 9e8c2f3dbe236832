"""The v1 front (an env server of today's prime-rl runs the same code) under a Docker engine that restarts:
vf-eval plays two episodes one at a time on a second, real engine (tests/second_engine.py), which is
stopped during the first episode's command and started again. Only that episode fails, naming the engine;
the next one waits for it and plays to the end."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from air.serving.server import PolicyServer
from rigs.patience import backstop
from tests.second_engine import SecondEngine

pytest.importorskip("verifiers.v1")

VF_EVAL = Path(sys.executable).parent / "vf-eval"


def _stop_during_the_first_sleep(engine: SecondEngine, run_id: str, done: threading.Event, seen: list[str]) -> None:
    """Stop the engine once an agent's `sleep 10` runs in one of the run's containers, start it 3 s later."""
    client = engine.client()
    try:
        deadline = time.monotonic() + backstop(300)
        while time.monotonic() < deadline and not done.is_set():
            for container in client.containers.list(filters={"label": f"air.run={run_id}"}, ignore_removed=True):
                try:
                    processes = container.top(ps_args="-eo pid,args")["Processes"] or []
                except Exception:  # removed meanwhile
                    continue
                seen[:] = [" ".join(p) for p in processes]
                if any("sleep 10" in line for line in seen):
                    seen.append("FIRED")
                    time.sleep(1)
                    engine.stop()
                    time.sleep(3)
                    engine.start()
                    return
            time.sleep(0.3)
    finally:
        client.close()


@pytest.mark.docker
@pytest.mark.timeout(600)
def test_an_engine_restart_fails_only_the_episode_it_was_running(second_engine: SecondEngine, tmp_path: Path) -> None:
    second_engine.start()
    run_id = f"pytest-v1-engine-{os.getpid()}"
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["sleep 10", "validate", "submit"]))
    done, seen = threading.Event(), []
    saboteur = threading.Thread(target=_stop_during_the_first_sleep, args=(second_engine, run_id, done, seen))
    with PolicyServer(f"script:{script}") as server:
        command = [
            str(VF_EVAL), "air_mlgym", "-m", "scripted", "--client.base-url", server.base_url,
            "--client.api-key-var", "AIR_TEST_KEY", "--no-push", "--no-rich", "-o", str(tmp_path / "evals"),
            "-n", "1", "-r", "2", "-c", "1", "--env.taskset.task-configs", '["laneMerge"]',
            "--env.taskset.image", second_engine.image, "--env.taskset.run-id", run_id,
            "--env.taskset.engine-wait", "180", "--env.taskset.trajectory-dir", str(tmp_path / "trajectories"),
        ]  # fmt: skip
        env = {**os.environ, "AIR_TEST_KEY": "x", "DOCKER_HOST": second_engine.address}
        saboteur.start()
        try:
            done_run = subprocess.run(
                command, capture_output=True, text=True, timeout=backstop(500), cwd=tmp_path, env=env
            )
        finally:
            done.set()
            saboteur.join()
    assert done_run.returncode == 0, done_run.stdout[-3000:] + done_run.stderr[-3000:]
    assert "FIRED" in seen, f"the engine was never stopped during an agent's sleep; processes seen: {set(seen)}"
    (traces_file,) = (tmp_path / "evals").rglob("traces.jsonl")
    episodes = [json.loads(line) for line in traces_file.read_text().splitlines() if line.strip()]
    assert len(episodes) == 2
    failed = [e for e in episodes if not e["ok"]]
    assert len(failed) == 1, [e["ok"] for e in episodes]
    errors = failed[0]["errors"] + [e for trace in failed[0]["traces"] for e in trace["errors"]]
    assert any(f"Docker engine unreachable at {second_engine.address}" in e["message"] for e in errors), errors
    for episode in episodes:
        if episode["ok"]:
            (trace,) = episode["traces"]
            assert trace["metrics"]["submitted"] == 1.0, "an episode after the restart plays to the end"
    records = [json.loads(p.read_text()) for p in (tmp_path / "trajectories").rglob("*.json")]
    masked = [r for r in records if r["error"]]
    assert len(masked) == 1 and second_engine.address in masked[0]["error"] and masked[0]["error_chain"]
    assert second_engine.containers(run_id) == [], "containers were left behind"
