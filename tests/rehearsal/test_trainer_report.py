"""``air rehearse --trainer``'s report: each planted fault fails it with its reason, a healthy run passes.

The trainer's step lines, the batches and the broadcast are real files here (the batch packed the way
prime-rl's msgspec packs it, the adapter in PEFT's layout for the tiny model); what prime-rl's trainer
writes itself is exercised by the opt-in end-to-end tests.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest

from air.rehearsal.classic.batches import figures, read_batch
from air.rehearsal.classic.batches import trained_samples as classic_samples
from air.rehearsal.launch import Episodes
from air.rehearsal.live_trainer import cpu_batch, finish_trainer_run
from air.rehearsal.report import report_from
from air.rehearsal.trainer_report import TrainerRun, TrainerStep, latest_broadcast, trainer_problems
from air.serving.vllm_api import WeightUpdate
from tests.lora_files import write_adapter
from tests.rehearsal.test_batches import IM_START, group, sample, write

STEPS = 2


def step_line(step: int, **changes) -> dict:
    line = dict(
        step=step,
        loss=-0.0123,
        grad_norm=3e-4,
        max_param_change=1e-5,
        trainable_tensors=28,
        changed_tensors=28,
        params_finite=True,
        loss_tokens=400,
        samples=8,
        peak_memory_gib=None,
        step_time_s=4.2,
        device="cpu",
        finished_at=1000.0 + step,
    )
    return {**line, **changes}


@pytest.fixture(scope="module")
def base(tiny_model_dir: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def rehearsal(tmp_path: Path, tiny_model_dir: Path, base, *, batch=None, lines=None, adapter_extra=None, loads=2):
    """A finished --trainer rehearsal's files, read back into its report."""
    batches = []
    for step in range(STEPS):
        examples = batch if batch is not None else group([1.0, 0.0, 0.5, 0.5], [2, 1, 1, 2], prompt=(IM_START, 5, 6))
        batches.append(read_batch(write(tmp_path / "rollouts", examples, step))[1])
    run_dir = tmp_path / "run"
    broadcast = run_dir / "broadcasts" / f"step_{STEPS}"
    write_adapter(broadcast, base, extra=adapter_extra)
    (broadcast / "STABLE").touch()
    probe = tmp_path / "trainer-steps.jsonl"
    probe.write_text("".join(json.dumps(line) + "\n" for line in (lines or [step_line(s) for s in range(STEPS)])))
    run = TrainerRun(device="cpu")
    # the scripted server's record: the loads the orchestrator asked for, each loaded
    updates = [
        WeightUpdate(
            "/load_lora_adapter", {"lora_name": "r", "lora_path": f"{run_dir}/broadcasts/step_{s}"}, loaded=True
        )
        for s in range(1, 1 + loads)
    ]
    received = finish_trainer_run(run, probe, run_dir, tiny_model_dir, classic_samples(batches), updates)
    batch_figures = figures(batches, "branching", group_size=4, special_ids={IM_START})
    return report_from(
        batch_figures,
        received,
        elapsed=10.0,
        launched_at=990.0,
        episodes=Episodes(dispatched=8, first_started=995.0),
        config="rl.toml",
        output_dir=str(tmp_path),
        steps_requested=STEPS,
        trajectory_strategy="branching",
        weight_updates=len(updates),
        trainer_run=run,
    )


def test_a_run_that_learned_passes_with_every_figure_in_the_json(tmp_path, tiny_model_dir, base):
    report = rehearsal(tmp_path, tiny_model_dir, base)
    assert report.problems() == []
    run = report.as_dict()["trainer_run"]
    assert [step["loss"] for step in run["steps"]] == [-0.0123, -0.0123]
    assert run["steps_with_gradient"] == [0, 1]
    sample = run["fixed_sample"]
    assert sample["changed"] and sample["step"] == 0 and sample["tokens"] > 0
    assert math.isfinite(sample["logprob_before"]) and sample["logprob_after"] != sample["logprob_before"]
    # per step: from the first rollout (995) to the end of the trainer's last step (1001)
    assert (report.seconds_per_step, report.startup_s) == (pytest.approx(3.0), pytest.approx(5.0))


def test_zero_advantages_fail_through_the_batch_and_excuse_a_zero_loss(tmp_path, tiny_model_dir, base):
    equal = group([0.5, 0.5, 0.5, 0.5], [1, 1, 1, 1], prompt=(IM_START, 5, 6))
    # no gradient: the loss is 0 and only weight decay moves LoRA's A (B stays 0)
    lines = [step_line(s, loss=0.0, changed_tensors=14) for s in range(STEPS)]
    report = rehearsal(tmp_path, tiny_model_dir, base, batch=equal, lines=lines)
    assert report.trainer_run.steps_with_gradient == []
    assert [p for p in report.problems() if "every advantage is 0" in p]
    assert not [p for p in report.problems() if "loss is 0.0" in p or "did not change" in p]


def test_a_step_without_gradient_beside_steps_with_one_passes(tmp_path, tiny_model_dir, base):
    report = rehearsal(tmp_path, tiny_model_dir, base, lines=[step_line(0), step_line(1)])
    report.trainer_run.steps_with_gradient = [0]  # step 1's groups all had equal rewards
    report.trainer_run.steps[1].loss, report.trainer_run.steps[1].changed_tensors = 0.0, 14
    assert report.problems() == []


def test_a_zero_loss_over_a_batch_with_advantages_fails(tmp_path, tiny_model_dir, base):
    report = rehearsal(tmp_path, tiny_model_dir, base, lines=[step_line(0, loss=0.0), step_line(1)])
    assert [p for p in report.problems() if "loss" in p] == [
        "step 0: the loss is 0.0 over a batch with non-zero advantages: no reward reached the loss"
    ]


def test_a_mask_over_an_env_token_fails(tmp_path, tiny_model_dir, base):
    env_trained = sample([IM_START, 5], [9, IM_START, 4], -0.5, 0.0)  # the env's turn under the loss mask
    fine = sample([IM_START, 5], [9, 8], 0.5, 1.0)
    report = rehearsal(tmp_path, tiny_model_dir, base, batch=[fine, env_trained, fine, env_trained])
    assert any("loss mask covers" in p and "env turn tokens" in p for p in report.problems())


def test_a_frozen_parameter_fails(tmp_path, tiny_model_dir, base):
    lines = [step_line(0), step_line(1, changed_tensors=27)]
    report = rehearsal(tmp_path, tiny_model_dir, base, lines=lines)
    assert report.problems() == ["step 1: 1 of 28 trainable tensors did not change"]


def test_no_change_at_all_and_non_finite_figures_fail(tmp_path, tiny_model_dir, base):
    lines = [
        step_line(0, max_param_change=0.0, changed_tensors=0),
        step_line(1, loss=math.nan, grad_norm=math.inf, params_finite=False),
    ]
    problems = rehearsal(tmp_path, tiny_model_dir, base, lines=lines).problems()
    assert "step 0: no trainable parameter changed (frozen, zero learning rate, or no gradient)" in problems
    assert "step 1: the loss is nan (not finite)" in problems
    assert "step 1: the grad norm is inf" in problems
    assert "step 1: a trainable parameter is NaN or inf after the update" in problems


def test_an_unloadable_broadcast_fails_with_its_reason(tmp_path, tiny_model_dir, base):
    import torch

    stranger = {"base_model.model.model.layers.7.mlp.up_proj.lora_A.weight": torch.ones(4, 64)}
    report = rehearsal(tmp_path, tiny_model_dir, base, adapter_extra=stranger)
    assert report.trainer_run.fixed_sample is None
    assert any(
        "could not load a broadcast" in p and "'model.layers.7.mlp.up_proj' is no layer of the model" in p
        for p in report.problems()
    )


def test_a_server_that_never_loaded_and_a_trainer_that_stopped_early_fail(tmp_path, tiny_model_dir, base):
    problems = rehearsal(tmp_path, tiny_model_dir, base, lines=[step_line(0)], loads=0).problems()
    assert "the trainer finished 1 of 2 steps" in problems
    assert any("loaded no broadcast" in p for p in problems)


def test_no_load_is_required_before_the_orchestrator_must_ask_for_one():
    """c87c19b's orchestrator at max_async_level 1 (a LoRA run loads no step-0 adapter) may sample two steps
    on the first weights: a fast server finishes them before the trainer's first broadcast is there."""
    from air.rehearsal.trainer_report import trainer_problems

    run = TrainerRun(device="cpu", steps=[TrainerStep(**step_line(s)) for s in range(3)], ahead=1)
    assert not any("loaded no broadcast" in p for p in trainer_problems(run, 2))
    assert any("loaded no broadcast" in p for p in trainer_problems(run, 3))
    run.ahead = 0  # today's prime-rl loads step 0's weights before its first step
    assert any("loaded no broadcast" in p for p in trainer_problems(run, 2))


def test_a_fixed_sample_that_did_not_move_fails():
    from air.rehearsal.trainer_report import FixedSample

    steps = [TrainerStep(**step_line(s)) for s in range(STEPS)]
    same = FixedSample(step=0, tokens=12, logprob_before=-7.6, logprob_after=-7.6, broadcast="b/step_2")
    run = TrainerRun(
        device="cpu", steps=steps, broadcasts_loaded=["b/step_1"], fixed_sample=same, steps_with_gradient=[0, 1]
    )
    assert trainer_problems(run, STEPS) == ["the fixed sample's mean logprob did not move (-7.600000 -> -7.600000)"]
    assert trainer_problems(dataclasses.replace(run, fixed_sample=None), STEPS) == [
        "no broadcast to measure the fixed sample under: the trainer published no weights"
    ]


def test_the_newest_finished_broadcast_is_measured(tmp_path):
    for step, stable in ((1, True), (3, True), (10, False)):
        (tmp_path / "broadcasts" / f"step_{step}").mkdir(parents=True)
        if stable:
            (tmp_path / "broadcasts" / f"step_{step}" / "STABLE").touch()
    assert latest_broadcast(tmp_path) == tmp_path / "broadcasts" / "step_3"
    assert latest_broadcast(tmp_path / "absent") is None


def test_the_cpu_batch_keeps_two_groups_and_says_so():
    size, note = cpu_batch(16, 4)
    assert size == 8 and "16 -> 8 rollouts (2 groups of 4)" in note
    assert cpu_batch(8, 4) == (8, None) and cpu_batch(4, 4) == (4, None)
