"""Opt-in: ``air rehearse --trainer --policy smollm2``: a real model samples the rollouts, prime-rl's own
trainer (LoRA, CPU) learns from them, and the server serves its adapters (prime-rl's vLLM where the install has
it: air.serving.prime_rl_vllm), for both generations (as
test_rehearse_trainer_e2e.py: AIR_TEST_PRIME_RL_DIR, AIR_TEST_PRIME_RL_V1_DIR with --cpu-trainer installs), asked for
by AIR_TEST_SMOLLM2_REHEARSALS=1 (CI leaves them: SmolLM2 through prime-rl's own `rl` is test_rl_cpu_e2e.py's).

The shipped ``rl_2gpu.toml`` with replies of at most 24 tokens and 2 turns (CPU time), the test image. Checked
as for the tiny model where a step had a gradient (a real model's group may score alike: no gradient, loss
0), broadcasts loaded, the fixed sample moved, and through the server: the first trained sample's logprob
under the served model and under the trainer's last broadcast (loaded by the server's own route) equal
the fixed sample's and differ from each other, so the next rollouts are sampled from the updated weights.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pytest

from air.cli.main import main
from air.launch.prime_rl import cpu_venv
from air.serving.prime_rl_vllm import has_vllm
from tests.conftest import PRIME_RL_RUNS
from tests.opt_in import SMOLLM2_REHEARSALS, prime_rl_checkout, prime_rl_v1_checkout
from tests.rehearsal.test_rehearse_trainer_e2e import trainer_ready, with_image

pytestmark = [
    pytest.mark.xdist_group(PRIME_RL_RUNS),
    pytest.mark.skipif(not SMOLLM2_REHEARSALS, reason="5-10 minutes a pin: set AIR_TEST_SMOLLM2_REHEARSALS=1 too"),
]

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3  # c87c19b's orchestrator (max_async_level 1) must load a broadcast only from the third step on


def small(text: str) -> str:
    """Short replies and episodes: a 135M model on two cores. seq_len 2048 (samples are ~1,150 tokens): the
    trainer's packed micro-batch, its 49k-wide logits in float32, then peaks at about half the 12-14 GB RSS
    it reaches at 4096, which a 24 GB host running anything else could not give it."""
    text = re.sub(r"(?m)^(max_tokens|max_completion_tokens) = 512$", r"\1 = 24", text)
    text = re.sub(r"(?m)^seq_len = 4096$", "seq_len = 2048", text)
    return text.replace("max_turns = 10", "max_turns = 2")


def rehearse_smollm2(checkout: Path, config: Path, tmp_path: Path, smollm2, capsys, monkeypatch) -> dict:
    monkeypatch.setenv("AIR_CACHE_DIR", str(smollm2.path.parent))
    out = tmp_path / "rehearsal"
    argv = ["rehearse", "--config", str(config), "--steps", str(STEPS), "--trainer", "--prime-rl", str(checkout)]
    status = main([*argv, "--policy", "smollm2", "--output", str(out), "--json"])
    captured = capsys.readouterr()
    lines = captured.out.strip().splitlines()
    assert lines, f"air rehearse exited {status} with no report: {captured.err[-3000:]}"
    report = json.loads(lines[-1])
    (tmp_path / "report.json").write_text(json.dumps(report, indent=1))  # kept for a failure's reading
    assert status == 0, report["problems"]
    # Where prime-rl's venv has vLLM (the --cpu installs CI makes), prime-rl's own inference server samples.
    engine = "vllm" if has_vllm(cpu_venv(checkout) / "bin" / "python") else "air: transformers"
    assert report["engine"].startswith(engine), report["engine"]
    run = report["trainer_run"]
    assert len(run["steps"]) == STEPS and report["steps_completed"] == STEPS
    # A real model's group can score alike (every reply a format error): such a step has no gradient and a
    # loss of 0, which the report allows; at least one step must have had something to learn.
    with_gradient = set(run["steps_with_gradient"])
    assert with_gradient, "no step had a non-zero advantage"
    for step in run["steps"]:
        assert math.isfinite(step["loss"]) and step["params_finite"], step
        if step["step"] in with_gradient:
            assert step["loss"] != 0 and step["grad_norm"] > 0, step
            assert step["changed_tensors"] == step["trainable_tensors"] > 0, step
    assert run["broadcasts_loaded"] and run["broadcast_failures"] == []
    assert run["fixed_sample"]["changed"]
    served, fixed = run["served_sample"], run["fixed_sample"]
    assert served is not None, "the server was never asked for the sample under the trainer's last broadcast"
    assert served["model_before"] == str(smollm2.path) and served["model_after"] != served["model_before"]
    # The server's answer is the model's: the same figures as the fixed sample computed outside it.
    assert served["logprob_before"] == pytest.approx(fixed["logprob_before"], abs=1e-4)
    assert served["logprob_after"] == pytest.approx(fixed["logprob_after"], abs=1e-4)
    assert served["logprob_after"] != served["logprob_before"]
    return report


@pytest.mark.timeout(3000)
def test_smollm2_rehearses_with_the_trainer_against_c87c19b(tmp_path, docker_image, smollm2, capsys, monkeypatch):
    checkout = trainer_ready(prime_rl_checkout(), "AIR_TEST_PRIME_RL_DIR and install_prime_rl.sh --cpu-trainer")
    config = tmp_path / "rl_2gpu.toml"
    config.write_text(small(with_image((ROOT / "configs/mlgym/rl_2gpu.toml").read_text(), docker_image, "classic")))
    report = rehearse_smollm2(checkout, config, tmp_path, smollm2, capsys, monkeypatch)
    assert report["generation"] == "classic"


@pytest.mark.timeout(3000)
def test_smollm2_rehearses_with_the_trainer_against_todays_prime_rl(
    tmp_path, docker_image, smollm2, capsys, monkeypatch
):
    fix = "AIR_TEST_PRIME_RL_V1_DIR and install_prime_rl.sh --cpu-trainer --commit 559b447"
    checkout = trainer_ready(prime_rl_v1_checkout(), fix)
    config = tmp_path / "rl_2gpu.toml"
    config.write_text(small(with_image((ROOT / "configs/mlgym-v1/rl_2gpu.toml").read_text(), docker_image, "v1")))
    report = rehearse_smollm2(checkout, config, tmp_path, smollm2, capsys, monkeypatch)
    assert report["generation"] == "v1"
