"""air_prime_rl/trainer_probe.py: one JSON line per optimizer step, from global optimizer hooks, the batch and
the trainer's monitor metrics (as air_prime_rl/v1/trainer.py wires it to prime-rl's trainer)."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this venv")

from air_prime_rl.trainer_probe import Probe, samples_by_lengths, samples_by_positions  # noqa: E402


def test_one_line_per_step_with_parameter_change(tmp_path):
    path = tmp_path / "probe.jsonl"
    trained = torch.nn.Parameter(torch.ones(3, 2))
    untouched = torch.nn.Parameter(torch.ones(4))  # no gradient: AdamW leaves it as it is
    frozen = torch.nn.Parameter(torch.ones(5), requires_grad=False)
    optimizer = torch.optim.AdamW([trained, untouched, frozen], lr=0.1, weight_decay=0.0)
    probe = Probe(path, "cpu").install()
    try:
        for step in (1, 2):
            micro_batches = [
                {"loss_mask": torch.tensor([[False, True, True]]), "seq_lens": torch.tensor([1, 2])},
                {"loss_mask": torch.tensor([[False, False]]), "seq_lens": torch.tensor([2])},  # padding only
            ]
            probe.note_batch(*samples_by_lengths(micro_batches))
            (trained * 2).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            probe.note_metrics({"optim/grad_norm": torch.tensor(0.5), "step": step}, step=step)
            probe.note_metrics({"loss/mean": 0.25, "step": step})  # c87c19b: the step among the metrics
            written = path.read_text().splitlines() if path.exists() else []
            assert len(written) == step - 1  # written when the step time arrives
            probe.note_metrics({"time/step": 1.5, "step": step}, step=step)
    finally:
        probe.remove()
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["step"] for line in lines] == [1, 2]
    first = lines[0]
    assert first["loss"] == 0.25 and first["grad_norm"] == 0.5 and first["step_time_s"] == 1.5
    assert first["trainable_tensors"] == 2 and first["changed_tensors"] == 1
    assert first["max_param_change"] == pytest.approx(0.1, rel=1e-3)  # AdamW's first step moves by lr
    assert first["params_finite"] is True
    assert first["loss_tokens"] == 2 and first["samples"] == 2
    assert first["peak_memory_gib"] is None and first["device"] == "cpu"


def test_hooks_removed(tmp_path):
    probe = Probe(tmp_path / "probe.jsonl", "cpu").install()
    probe.remove()
    parameter = torch.nn.Parameter(torch.ones(2))
    optimizer = torch.optim.SGD([parameter], lr=1.0)
    parameter.sum().backward()
    optimizer.step()
    assert probe.change == {}


def test_packed_samples_are_counted_by_their_positions():
    packed = {"loss_mask": torch.tensor([[0, 1, 1, 0, 1, 0, 0]]), "position_ids": torch.tensor([[0, 1, 2, 0, 1, 0, 0]])}
    alone = {"loss_mask": torch.tensor([[1, 1]]), "position_ids": torch.tensor([[0, 1]])}
    assert samples_by_positions([packed, alone]) == (5, 3)  # two samples then padding; one short sample
