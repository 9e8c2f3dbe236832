"""``air rehearse --trainer``'s host side, without prime-rl: a trainer that does not import names the install
command; the wait stops at a broadcast the server could not load, at a trainer that dies, and lets the
trainer finish its last step after the orchestrator is done. Processes here are real (small shell scripts
standing in for prime-rl's, which the opt-in end-to-end tests run)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from air.rehearsal.errors import RehearsalError
from air.rehearsal.launch import Launched
from air.rehearsal.live_trainer import trainer_device, trainer_overrides, wait_for_training
from air.serving.vllm_api import WeightUpdate


@dataclass
class Settings:
    steps: int = 2
    timeout_s: float = 30.0


def launch(tmp_path: Path, name: str, script: str) -> Launched:
    return Launched(name, ["sh", "-c", script], tmp_path, tmp_path / f"{name}.log", tmp_path / "rl.toml", {})


def test_a_venv_where_the_trainer_does_not_import_names_the_install_command(tmp_path):
    with pytest.raises(RehearsalError) as caught:
        trainer_device(Path(sys.executable), "v1", tmp_path / "prime-rl")  # this venv has no prime_rl
    message = str(caught.value)
    assert "prime-rl's trainer does not import" in message and "No module named" in message
    assert message.endswith(f"bash scripts/install_prime_rl.sh --cpu-trainer --commit 559b447 {tmp_path / 'prime-rl'}")


def test_the_trainer_finishes_its_last_step_after_the_orchestrator(tmp_path):
    probe = tmp_path / "steps.jsonl"
    orchestrator = launch(tmp_path, "orchestrator", f"echo '{{}}' > {probe}; exit 0")
    trainer = launch(tmp_path, "trainer", f"sleep 1; echo '{{}}' >> {probe}; exit 0")
    heard = []
    try:
        wait_for_training(orchestrator, trainer, [], probe, Settings(), lambda *event: heard.append(event))
    finally:
        orchestrator.stop(grace=1), trainer.stop(grace=1)
    assert trainer.exited() == 0 and heard[-1] == ("steps", 2, 2)


@pytest.mark.parametrize("culprit", ["trainer", "env server"])
def test_a_process_that_dies_stops_the_wait_with_its_log(tmp_path, culprit):
    orchestrator = launch(tmp_path, "orchestrator", "sleep 30")
    trainer = launch(
        tmp_path, "trainer", "echo 'CUDA out of memory' >&2; exit 3" if culprit == "trainer" else "sleep 30"
    )
    others = [launch(tmp_path, "env server", "echo 'port in use'; exit 1")] if culprit == "env server" else []
    try:
        with pytest.raises(RehearsalError) as caught:
            wait_for_training(orchestrator, trainer, others, tmp_path / "steps.jsonl", Settings(), lambda *e: None)
    finally:
        for process in (orchestrator, trainer, *others):
            process.stop(grace=1)
    message = str(caught.value)
    assert message.startswith(f"{culprit} exited with status")
    assert ("CUDA out of memory" if culprit == "trainer" else "port in use") in message


def test_a_broadcast_the_server_could_not_load_stops_the_wait_with_the_reason(tmp_path):
    orchestrator = launch(tmp_path, "orchestrator", "sleep 30")  # it would retry the load, or die without why
    trainer = launch(tmp_path, "trainer", "sleep 30")
    updates = [WeightUpdate("/load_lora_adapter", {}, loaded=True)]
    updates.append(WeightUpdate("/load_lora_adapter", {}, loaded=False, error="step_2: 'x' is no layer of the model"))
    try:
        with pytest.raises(RehearsalError, match="could not load the trainer's broadcast: step_2: 'x' is no layer"):
            wait_for_training(orchestrator, trainer, [], tmp_path / "s.jsonl", Settings(), lambda *e: None, updates)
    finally:
        orchestrator.stop(grace=1), trainer.stop(grace=1)


def test_the_trainer_gets_a_copy_of_the_tiny_model(tmp_path):
    model = tmp_path / "tiny"
    (model / "prime").mkdir(parents=True)  # what prime-rl wrote into a folder it loaded before
    (model / "config.json").write_text("{}")
    overrides = trainer_overrides(model, tmp_path / "run", 3, "cpu", tmp_path)
    copy = Path(overrides["model_dir"])
    assert copy != model and (copy / "config.json").is_file() and not (copy / "prime").exists()
    assert overrides == {"model_dir": str(copy), "output_dir": str(tmp_path / "run"), "max_steps": 3, "device": "cpu"}
