"""`air replay` stopped by SIGTERM (a scheduler's or `timeout`'s stop) while its rollout runs a command: it
ends the way Ctrl-C does, in one line and no traceback, with exit status 143 (docs/standalone.md), and
leaves no container behind. A real `air replay` process on a real container, its recorded first command a
long sleep so the signal lands mid-rollout."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import docker
import pytest

from air.sandbox.config import LABEL_PID
from rigs.patience import backstop
from tests.sampling_task import TASK, write_sampling_root

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


def _mlgym_run(folder: Path, commands: list[str]) -> Path:
    run = folder / f"made-up-model__{TASK}__default__t-0.00__p-0.95__c-4.00__install-0_run_0"
    run.mkdir(parents=True)
    steps = [{"action": c, "observation": "", "response": c, "thought": ""} for c in commands]
    info = {"exit_status": "submitted", "score": [{"Score": 1.0}], "model_stats": {}}
    (run / f"{TASK}.traj").write_text(json.dumps({"environment": "mlgym_main", "trajectory": steps, "info": info}))
    return run


def _containers_of(pid: int) -> list[str]:
    """The containers the process ``pid`` owns (by its owner label: no other run's)."""
    client = docker.from_env()
    try:
        return [c.id for c in client.containers.list(all=True, filters={"label": f"{LABEL_PID}={pid}"}, sparse=True)]
    finally:
        client.close()


def test_sigterm_mid_rollout_ends_like_ctrl_c_in_one_line_with_143_and_leaves_no_container(
    tmp_path: Path, docker_image: str
) -> None:
    root = write_sampling_root(tmp_path / "root")
    run = _mlgym_run(tmp_path / "runs", ["sleep 120", "validate"])
    proc = subprocess.Popen(
        [sys.executable, "-m", "air.cli.main", "replay", str(run), "--task-root", str(root), "--image", docker_image],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(REPO)},  # this checkout's air, wherever it is
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + backstop(180)
        while not _containers_of(proc.pid):
            assert proc.poll() is None, f"the replay ended before its container started: {proc.communicate()}"
            assert time.monotonic() < deadline, f"no container in {backstop(180):.0f} s"
            time.sleep(0.2)
        time.sleep(3)  # the workspace laid out, `sleep 120` running in the container
        assert proc.poll() is None
        proc.terminate()  # SIGTERM
        stdout, stderr = proc.communicate(timeout=backstop(120))
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143, stdout + stderr
    assert "Traceback" not in stdout + stderr, stderr
    said = [line for line in stderr.splitlines() if not line.startswith("warning: ")]  # the engine's quota note
    assert said == ["air: terminated: the replay was stopped (SIGTERM) before it ended; its container is removed"]
    assert _containers_of(proc.pid) == []  # removed before the process ended, not left to a reaper
