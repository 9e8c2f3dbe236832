"""Opt-in: ``air rehearse --trainer``: prime-rl's own trainer learns live from air_mlgym's batches, on the
CPU here (CUDA where there is one), for both generations: c87c19b (AIR_TEST_PRIME_RL_DIR) and 559b447
(AIR_TEST_PRIME_RL_V1_DIR), each installed by ``install_prime_rl.sh --cpu-trainer [--commit 559b447]``.

The shipped ``rl_2gpu.toml`` of each generation, with only the test image named in its env args. Checked:
exit 0, every step's loss non-zero and finite, every trainable tensor changed, the broadcasts loaded by
the scripted server, the fixed sample's logprob moved, and the report's figures equal the trainer's files.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest

from air.cli.main import main
from air.launch.prime_rl import cpu_venv
from air.rehearsal.live_trainer import PROBE
from tests.conftest import PRIME_RL_RUNS, unavailable
from tests.opt_in import prime_rl_checkout, prime_rl_v1_checkout

pytestmark = pytest.mark.xdist_group(PRIME_RL_RUNS)

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3


def trainer_ready(checkout: Path | None, fix: str) -> Path:
    if checkout is None:
        unavailable("the rehearsal with prime-rl's trainer", f"no prime-rl checkout for this generation: {fix}")
    python = cpu_venv(checkout) / "bin" / "python"
    done = subprocess.run([str(python), "-c", "import prime_rl.trainer.rl.train"], capture_output=True, timeout=600)
    if done.returncode != 0:
        unavailable(
            "the rehearsal with prime-rl's trainer",
            f"prime-rl's trainer does not import in {python}: install it with {fix}",
        )
    return checkout


def with_image(text: str, image: str, generation: str) -> str:
    """The shipped config, its tasks run in the test image (nothing else changed)."""
    if generation == "classic":
        return text.replace('run_id = "rl-2gpu" }', f'run_id = "rl-2gpu", image = "{image}" }}')
    return re.sub(r'(?m)^run_id = "rl-2gpu"$', f'run_id = "rl-2gpu"\nimage = "{image}"', text)


def rehearse(checkout: Path, config: Path, tmp_path: Path, tiny_model_dir: Path, capsys) -> tuple[int, dict, Path]:
    out = tmp_path / "rehearsal"
    argv = ["rehearse", "--config", str(config), "--steps", str(STEPS), "--trainer", "--prime-rl", str(checkout)]
    status = main([*argv, "--output", str(out), "--model", str(tiny_model_dir), "--json"])
    return status, json.loads(capsys.readouterr().out.strip().splitlines()[-1]), out


def check_learned(status: int, report: dict, out: Path) -> None:
    assert status == 0, report["problems"]
    run = report["trainer_run"]
    steps = run["steps"]
    assert len(steps) == STEPS and report["steps_completed"] == STEPS
    for step in steps:
        assert math.isfinite(step["loss"]) and step["loss"] != 0, step
        assert math.isfinite(step["grad_norm"]) and step["grad_norm"] > 0, step
        assert step["changed_tensors"] == step["trainable_tensors"] > 0 and step["max_param_change"] > 0, step
        assert step["params_finite"] and step["loss_tokens"] > 0 and step["samples"] > 0, step
    sample = run["fixed_sample"]
    assert [json.loads(line)["loss"] for line in (out / PROBE).read_text().splitlines()] == [s["loss"] for s in steps]
    # the orchestrator asks for the weights it needs (one step behind at most): at least one load
    assert run["broadcasts_loaded"] and run["broadcast_failures"] == []
    assert all(Path(folder).parent == Path(sample["broadcast"]).parent for folder in run["broadcasts_loaded"])
    assert sample["changed"] and sample["tokens"] > 0 and Path(sample["broadcast"]).is_dir()
    assert report["loss_mask_ok"] and report["advantage_nonzero_share"] > 0
    if run["device"] == "cpu":
        assert run["sizing"] is None or "rollouts" in run["sizing"]


@pytest.mark.timeout(1800)
def test_rehearse_trainer_against_c87c19b(tmp_path, docker_image, tiny_model_dir, capsys):
    checkout = trainer_ready(prime_rl_checkout(), "AIR_TEST_PRIME_RL_DIR and install_prime_rl.sh --cpu-trainer")
    config = tmp_path / "rl_2gpu.toml"
    config.write_text(with_image((ROOT / "configs/mlgym/rl_2gpu.toml").read_text(), docker_image, "classic"))
    status, report, out = rehearse(checkout, config, tmp_path, tiny_model_dir, capsys)
    check_learned(status, report, out)
    assert report["generation"] == "classic"
    assert (out / "run_default" / "broadcasts").is_dir()


@pytest.mark.timeout(1800)
def test_rehearse_trainer_against_559b447(tmp_path, docker_image, tiny_model_dir, capsys):
    fix = "AIR_TEST_PRIME_RL_V1_DIR and install_prime_rl.sh --cpu-trainer --commit 559b447"
    checkout = trainer_ready(prime_rl_v1_checkout(), fix)
    config = tmp_path / "rl_2gpu.toml"
    config.write_text(with_image((ROOT / "configs/mlgym-v1/rl_2gpu.toml").read_text(), docker_image, "v1"))
    status, report, out = rehearse(checkout, config, tmp_path, tiny_model_dir, capsys)
    check_learned(status, report, out)
    assert report["generation"] == "v1"


def test_the_image_is_the_only_change_to_the_shipped_configs():
    for generation, path in (("classic", "configs/mlgym/rl_2gpu.toml"), ("v1", "configs/mlgym-v1/rl_2gpu.toml")):
        text = (ROOT / path).read_text()
        changed = with_image(text, "img:1", generation)
        assert changed.count('image = "img:1"') == 3
        assert changed.replace(', image = "img:1"', "").replace('\nimage = "img:1"', "") == text
