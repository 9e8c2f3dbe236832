"""Per-step measurements of a real prime-rl trainer, written as JSON lines: generic hooks, no prime-rl import.

`Probe` gathers one record per optimizer step from three places, all outside the trainer's code:

- global optimizer hooks (`torch.optim.optimizer.register_optimizer_step_pre_hook` / `_post_hook`): the
  trainable tensors are copied before each step and compared after it (max |Δ|, how many changed, all
  finite);
- the trainer's batch (`note_batch`, called by the entry with the micro batches it loaded): loss tokens and
  samples (each generation's entry counts them: `samples_by_lengths`, `samples_by_positions`);
- the trainer's own monitor (`note_metrics`, wrapping its log call): loss, grad norm, step time; the record
  is written when the step's "time/step" arrives.

Line keys: step, loss, grad_norm, max_param_change, trainable_tensors, changed_tensors, params_finite,
loss_tokens, samples, peak_memory_gib (CUDA max allocated; null on the CPU), step_time_s (the trainer's own
time/step, waiting for the batch included), train_s (from the batch loaded to the update done: the compute),
finished_at (epoch seconds), device.
stdlib + torch only.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import torch

LOSS_KEYS = ("loss/mean", "loss")
GRAD_NORM_KEYS = ("optim/grad_norm", "grad_norm")
STEP_TIME_KEYS = ("time/step",)


def _local(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor's local shard (FSDP2 parameters), else the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return (to_local() if callable(to_local) else tensor).detach()


def _first(metrics: dict, keys: tuple[str, ...]):
    for key in keys:
        if key in metrics:
            value = metrics[key]
            return float(value.item() if hasattr(value, "item") else value)
    return None


class Probe:
    def __init__(self, path: Path, device: str, rank: int = 0):
        self.path, self.device, self.rank = Path(path), device, rank
        self.metrics: dict = {}
        self.before: dict[int, torch.Tensor] = {}
        self.change: dict = {}
        self.batch: dict = {}
        self.batch_at: float | None = None
        self.handles: list = []

    def install(self) -> Probe:
        from torch.optim.optimizer import register_optimizer_step_post_hook, register_optimizer_step_pre_hook

        self.handles = [register_optimizer_step_pre_hook(self._pre), register_optimizer_step_post_hook(self._post)]
        return self

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles = []

    @staticmethod
    def _trainable(optimizer) -> list[torch.Tensor]:
        return [p for group in optimizer.param_groups for p in group["params"] if p.requires_grad]

    def _pre(self, optimizer, args, kwargs) -> None:
        self.before = {id(p): _local(p).clone() for p in self._trainable(optimizer)}

    def _post(self, optimizer, args, kwargs) -> None:
        params = self._trainable(optimizer)
        max_change, changed, finite = 0.0, 0, True
        for p in params:
            now = _local(p)
            finite = finite and bool(torch.isfinite(now).all())
            old = self.before.get(id(p))
            if old is None:
                continue
            delta = (now.float() - old.float()).abs()
            if delta.numel():
                biggest = float(delta.max())
                max_change = max(max_change, biggest)
                changed += biggest > 0
        self.before = {}
        self.change = {
            "max_param_change": max_change,
            "trainable_tensors": len(params),
            "changed_tensors": changed,
            "params_finite": finite,
            "train_s": None if self.batch_at is None else time.monotonic() - self.batch_at,
        }

    def note_batch(self, loss_tokens: int, samples: int) -> None:
        """The step's batch as the trainer loaded it: tokens under the loss mask, samples with any."""
        self.batch = {"loss_tokens": int(loss_tokens), "samples": int(samples)}
        self.batch_at = time.monotonic()

    def note_metrics(self, metrics: dict, step: int | None = None) -> None:
        if step is None and "step" in metrics:  # c87c19b logs its step among the metrics
            step = int(metrics["step"])
        self.metrics.update({k: v for k, v in metrics.items() if k != "step"})
        if step is not None:
            self.metrics["step"] = step
        if any(key in metrics for key in STEP_TIME_KEYS):
            self.write()

    def write(self) -> None:
        m = self.metrics
        peak = None
        if self.device == "cuda" and torch.cuda.is_available():
            peak = torch.cuda.max_memory_allocated() / 1024**3
        line = {
            "step": int(m.get("step", 0)),
            "loss": _first(m, LOSS_KEYS),
            "grad_norm": _first(m, GRAD_NORM_KEYS),
            **{"max_param_change": None, "trainable_tensors": 0, "changed_tensors": 0, "params_finite": False},
            **self.change,
            **{"loss_tokens": 0, "samples": 0},
            **self.batch,
            "peak_memory_gib": peak,
            "step_time_s": _first(m, STEP_TIME_KEYS),
            "finished_at": time.time(),
            "device": self.device,
        }
        for key in ("loss", "grad_norm"):
            if line[key] is not None and not math.isfinite(line[key]):
                line[key] = str(line[key])  # JSON has no NaN/inf: kept visible as a string
        if self.rank == 0:
            with self.path.open("a") as out:
                out.write(json.dumps(line) + "\n")
        self.metrics, self.change, self.batch, self.batch_at = {}, {}, {}, None


def samples_by_lengths(micro_batches) -> tuple[int, int]:
    """(loss tokens, samples) of micro batches that carry `seq_lens` (prime-rl main): a micro batch of
    padding only has no loss and counts no sample."""
    loss_tokens = samples = 0
    for micro_batch in micro_batches:
        tokens = int(micro_batch["loss_mask"].sum())
        loss_tokens += tokens
        samples += int(len(micro_batch["seq_lens"])) if tokens else 0
    return loss_tokens, samples


def samples_by_positions(micro_batches) -> tuple[int, int]:
    """(loss tokens, samples) of packed micro batches that carry only `position_ids` (prime-rl c87c19b): a
    sample starts where positions go back to 0 and continue with 1 (trailing zeros are padding), as its
    get_response_lengths splits them."""
    loss_tokens = samples = 0
    for micro_batch in micro_batches:
        loss_tokens += int(micro_batch["loss_mask"].sum())
        positions = micro_batch["position_ids"].flatten()
        if positions.numel() < 3:
            samples += 1
            continue
        starts = (positions[1:-1] == 0) & (positions[:-2] != 0) & (positions[2:] == 1)
        samples += 1 + int(starts.sum())
    return loss_tokens, samples
