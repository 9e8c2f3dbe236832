"""verifiers 0.4.0's own vf-eval against SmolLM2 served on the CPU (``air policy-server --policy smollm2``):
the v1 front's episodes in real containers, every reply the model's own sample. scripts/test.sh gives
`.venv-v1` the `tiny` extra for it; the model is conftest's ``smollm2`` (prepared once from PyPI)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from air.serving.server import PolicyServer

pytest.importorskip("verifiers.v1")

VF_EVAL = Path(sys.executable).parent / "vf-eval"


@pytest.mark.docker
def test_v1_vf_eval_runs_air_mlgym_against_smollm2(docker_image: str, smollm2, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("AIR_CACHE_DIR", str(smollm2.path.parent))
    out = tmp_path / "evals"
    run_id = f"pytest-v1-smollm2-{os.getpid()}-{tmp_path.name}"
    with PolicyServer("smollm2") as server:
        command = [
            str(VF_EVAL), "air_mlgym", "-m", server.model_name, "--client.base-url", server.base_url,
            "--client.api-key-var", "AIR_TEST_KEY", "--no-push", "--no-rich", "-o", str(out), "-n", "1", "-r", "2",
            "--sampling.max-tokens", "24", "--env.taskset.task-configs", '["laneMerge"]',
            "--env.taskset.max-turns", "2", "--env.taskset.image", docker_image,
            "--env.taskset.trajectory-dir", str(tmp_path / "trajectories"), "--env.taskset.run-id", run_id,
        ]  # fmt: skip
        env = {**os.environ, "AIR_TEST_KEY": "x"}
        done = subprocess.run(command, capture_output=True, text=True, timeout=900, cwd=tmp_path, env=env)
        served = server.app.requests_served
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (traces,) = list(out.rglob("traces.jsonl"))
    episodes = [json.loads(line) for line in traces.read_text().splitlines() if line.strip()]
    assert len(episodes) == 2 and all(episode["ok"] for episode in episodes), [e["errors"] for e in episodes]
    turns = 0
    for episode in episodes:
        (trace,) = episode["traces"]
        record = json.loads(Path(trace["info"]["trajectory_path"]).read_text())
        assert 1 <= len(record["turns"]) <= 2 and all(turn["model_text"] for turn in record["turns"])
        turns += len(record["turns"])
    assert served == turns, "every turn's reply came from the served model, one request each"
