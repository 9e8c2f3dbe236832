"""``air standalone`` with a model where prime-rl is installed with vLLM: prime-rl's own inference server
serves it (docs/decisions/0018-one-serving-engine.md); without such an install, air's engine does. The live
run needs today's pin installed with --cpu (AIR_TEST_PRIME_RL_V1_CPU_DIR; CI installs it; skipped without,
failed in CI)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from air.runs.standalone import _policy_server
from air.runs.standalone_settings import StandaloneSettings
from air.serving.prime_rl_vllm import PrimeRlVllm, has_vllm
from air.serving.server import PolicyServer
from rigs.patience import backstop
from tests.conftest import PRIME_RL_RUNS, unavailable
from tests.opt_in import prime_rl_cpu_checkout


def install_with_vllm(root: Path) -> Path:
    """A prime-rl checkout's layout whose venv holds vLLM's server module and prime-rl's ``inference``."""
    for relative in (
        "src/prime_rl/entrypoints/env_server.py",
        ".venv-cpu/bin/python",
        ".venv-cpu/bin/inference",
        ".venv-cpu/lib/python3.12/site-packages/vllm/entrypoints/openai/api_server.py",
    ):
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text("")
    return root


def test_a_model_goes_to_prime_rls_vllm_only_where_an_install_has_it(tmp_path, monkeypatch):
    root = install_with_vllm(tmp_path / "prime-rl")
    (tmp_path / "config.json").write_text("{}")  # a model folder, as far as choosing its server goes
    model = f"model:{tmp_path}"
    chosen = _policy_server(StandaloneSettings(policy=model, prime_rl=str(root)), tmp_path / "a")
    assert isinstance(chosen, PrimeRlVllm) and chosen.generation == "v1" and chosen.model_dir == tmp_path
    monkeypatch.setenv("PRIME_RL_DIR", str(root))  # the default, as air rehearse reads it
    assert isinstance(_policy_server(StandaloneSettings(policy=model), tmp_path / "b"), PrimeRlVllm)
    # A scripted agent is never a model vLLM could serve; an install without vLLM leaves air's engine.
    assert isinstance(_policy_server(StandaloneSettings(policy="noisy"), tmp_path / "c"), PolicyServer)
    monkeypatch.delenv("PRIME_RL_DIR")
    (root / ".venv-cpu/bin/inference").unlink()
    settings = StandaloneSettings(policy="noisy", prime_rl=str(root))
    assert isinstance(_policy_server(settings, tmp_path / "d"), PolicyServer)


@pytest.mark.xdist_group(PRIME_RL_RUNS)
@pytest.mark.timeout(1200)
def test_smollm2_plays_through_prime_rls_vllm(smollm2, tmp_path):
    checkout = prime_rl_cpu_checkout("v1")
    if checkout is None or not has_vllm(checkout / ".venv-cpu" / "bin" / "python"):
        unavailable("air standalone on prime-rl's vLLM", "no --cpu install of 559b447: AIR_TEST_PRIME_RL_V1_CPU_DIR")
    env = {**os.environ, "AIR_CACHE_DIR": str(smollm2.path.parent)}
    out = tmp_path / "run"
    argv = ["standalone", "--env", "simple_env", "--policy", "smollm2", "--prime-rl", str(checkout), "--steps", "1"]
    argv += ["--batch-size", "2", "--rollouts-per-example", "2", "--max-turns", "2", "--max-tokens", "24"]
    done = subprocess.run(
        [sys.executable, "-m", "air.cli.main", *argv, "--output-dir", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=backstop(900),
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    [step] = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert step["rollouts"] == 2 and step["masked"] == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["model"] == str(smollm2.path)
    assert summary["base_url"].startswith("prime-rl's vLLM"), summary["base_url"]
    # Every reply came from vLLM: its access log holds a chat completion per model turn (2 rollouts, 1-2 turns).
    served = re.findall(r'"POST /v1/chat/completions HTTP/1.1" 200', (out / "vllm" / "vllm.log").read_text())
    assert 2 <= len(served) <= 4, len(served)
