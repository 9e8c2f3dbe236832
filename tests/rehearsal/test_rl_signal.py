"""The RL signal guard: one step of prime-rl's own trainer (its entry, loss and AdamW step; CUDA calls to the CPU)
on a fixed batch of two completions of one prompt, advantages +A and -A, must raise the logprob of the first
relative to the second; the same check must fail when the advantages are zeroed (flat) or negated (it falls).

Both pins, each installed by ``install_prime_rl.sh --cpu`` (AIR_TEST_PRIME_RL_V1_CPU_DIR: 559b447,
AIR_TEST_PRIME_RL_CPU_DIR: c87c19b; CI sets both) or ``--cpu-trainer`` (AIR_TEST_PRIME_RL_V1_DIR,
AIR_TEST_PRIME_RL_DIR): skipped without, failed in CI. About 20 s a run on 2 cores (rigs/rl_signal.py).
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
from pathlib import Path

import pytest

from air.launch.prime_rl import cpu_venv
from rigs.rl_signal import ADVANTAGE, TOLERANCE, SignalRun, run_signal
from tests.conftest import unavailable
from tests.opt_in import prime_rl_checkout, prime_rl_cpu_checkout, prime_rl_v1_checkout

GENERATIONS = {"v1": "559b447", "classic": "c87c19b"}


@functools.cache
def _trainer_problem(python: Path) -> str | None:
    done = subprocess.run([str(python), "-c", "import prime_rl.trainer.rl.train"], capture_output=True, timeout=600)
    return None if done.returncode == 0 else f"prime-rl's trainer does not import in {python}"


def checkout(generation: str) -> Path:
    found = prime_rl_cpu_checkout(generation) or (prime_rl_v1_checkout() if generation == "v1" else prime_rl_checkout())
    commit, variable = ("", "CPU_DIR") if generation == "classic" else (" --commit 559b447", "V1_CPU_DIR")
    fix = f"install_prime_rl.sh --cpu{commit} DIR, then AIR_TEST_PRIME_RL_{variable}=DIR"
    python = cpu_venv(found) / "bin" / "python" if found else None
    if python is None or not python.is_file():
        unavailable("the RL signal guard", f"no prime-rl {GENERATIONS[generation]} install with its trainer: {fix}")
    problem = _trainer_problem(python)
    if problem:
        unavailable("the RL signal guard", f"{problem}: {fix}")
    return found


def signal(generation: str, advantage: float, tiny_model_dir: Path, tmp_path: Path) -> SignalRun:
    run = run_signal(checkout(generation), generation, tiny_model_dir, tmp_path / "signal", advantage)
    print(json.dumps(run.as_dict()))  # the figures, for -s and the CI log
    step = run.step
    assert step["step"] in (0, 1) and step["samples"] == 2 and step["loss_tokens"] == sum(run.tokens), step
    assert math.isfinite(step["loss"]) and step["params_finite"], step
    if "mismatch_kl/all/mean" in run.metrics:  # 559b447 logs it: the batch's logprobs are the trainer's own
        assert run.metrics["mismatch_kl/all/mean"] < 1e-6 and run.metrics["is_masked/mean"] == 0, run.metrics
    return run


@pytest.mark.timeout(900)
@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_a_step_raises_the_higher_advantage_completion_over_the_lower(generation, tiny_model_dir, tmp_path):
    run = signal(generation, ADVANTAGE, tiny_model_dir, tmp_path)
    assert step_learned(run.step)
    assert run.verdict == "rose", run.as_dict()


@pytest.mark.timeout(900)
@pytest.mark.parametrize("case", ["zeroed", "negated"])
@pytest.mark.parametrize("generation", list(GENERATIONS))
def test_the_check_fails_with_the_advantages_zeroed_or_negated(generation, case, tiny_model_dir, tmp_path):
    run = signal(generation, 0.0 if case == "zeroed" else -ADVANTAGE, tiny_model_dir, tmp_path)
    if case == "zeroed":  # no policy gradient: only the loss's KL term (its ratio is 1) and weight decay move it
        assert step_learned(run.step) is False and abs(run.gain) < TOLERANCE / 10, run.as_dict()
        assert run.verdict == "flat"
    else:
        assert step_learned(run.step)
        assert run.verdict == "fell", run.as_dict()


def step_learned(step: dict) -> bool:
    """A step with a gradient: a non-zero loss and grad norm, every trainable tensor changed."""
    moved = step["changed_tensors"] == step["trainable_tensors"] > 0 and step["max_param_change"] > 1e-6
    return abs(step["loss"]) > 1e-6 and step["grad_norm"] > 1e-3 and moved
