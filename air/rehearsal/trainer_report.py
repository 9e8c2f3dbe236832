"""What prime-rl's real trainer did in ``air rehearse`` with ``--trainer``, and whether it learned.

Per step, from the trainer's own figures and the rehearsal's optimizer hooks (``trainer-steps.jsonl``):
loss, grad norm, the largest change of a trainable tensor, how many tensors changed, whether every
trainable parameter is finite, loss tokens, samples, peak GPU memory, step time. From the server:
which broadcasts it loaded. From the tiny model: a fixed sample's mean logprob under the start weights
and under the last broadcast. :func:`trainer_problems` turns these into the reasons a run fails.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

STABLE = "STABLE"


@dataclass
class TrainerStep:
    step: int
    loss: float
    grad_norm: float
    max_param_change: float
    trainable_tensors: int
    changed_tensors: int
    params_finite: bool
    loss_tokens: int
    samples: int
    peak_memory_gib: float | None
    step_time_s: float | None  # prime-rl's own time/step (waiting for the batch included)
    device: str
    train_s: float | None = None  # from the batch loaded to the update done: the step's compute
    finished_at: float | None = None  # epoch seconds when the step's update was done


@dataclass
class FixedSample:
    """One sample of the first batch: its trained tokens' mean logprob before and after training."""

    step: int
    tokens: int  # tokens under its loss mask
    logprob_before: float  # under the start weights (what the server served for it)
    logprob_after: float  # under the last broadcast the trainer published
    broadcast: str  # that broadcast's folder

    @property
    def changed(self) -> bool:
        return self.logprob_after != self.logprob_before


@dataclass
class ServedSample:
    """The fixed sample's tokens sent to the running server (``prompt_logprobs``) under the served model
    and under the trainer's last broadcast, loaded by the server's own LoRA route as the orchestrator loads
    each one: what the next rollouts would be sampled from."""

    model_before: str
    model_after: str
    logprob_before: float
    logprob_after: float


@dataclass
class TrainerRun:
    device: str
    sizing: str | None = None  # how the batch was cut for the CPU, when it was
    steps: list[TrainerStep] = field(default_factory=list)
    # the trainer's broadcasts the server loaded when the orchestrator asked (it asks for those it
    # needs: with max_async_level 1 not every step's); the last one is loaded for the fixed sample
    broadcasts_loaded: list[str] = field(default_factory=list)
    broadcast_failures: list[str] = field(default_factory=list)  # each load that failed, with its reason
    fixed_sample: FixedSample | None = None
    served_sample: ServedSample | None = None  # a model that samples: the same sample asked of the server
    steps_with_gradient: list[int] = field(default_factory=list)  # steps whose batch had a non-zero advantage
    # steps the orchestrator may sample ahead of the trainer's weights (c87c19b: max_async_level; a LoRA run
    # loads no step-0 adapter) before it must load a broadcast; today's loads step 0's first (0)
    ahead: int = 0


def read_steps(path: Path) -> list[TrainerStep]:
    """The trainer's per-step lines; a line that is not one is skipped (a crash mid-write)."""
    steps = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return []
    names = set(TrainerStep.__dataclass_fields__)
    for line in lines:
        try:
            entry = {key: value for key, value in json.loads(line).items() if key in names}
            for key in ("loss", "grad_norm", "max_param_change"):  # "nan" as a string: JSON has no NaN
                entry[key] = math.nan if entry.get(key) is None else float(entry[key])
            steps.append(TrainerStep(**entry))
        except (ValueError, TypeError, AttributeError):
            continue
    return steps


def broadcast_loads(weight_updates: list[Any]) -> tuple[list[str], list[str]]:
    """From the server's record: the folders it loaded, and each failure with the folder and reason."""
    loaded = [
        str(update.body.get("lora_path") or update.body.get("weight_dir") or update.route)  # vLLM's log: no folder
        for update in weight_updates
        if update.loaded
    ]
    failed = [update.error or "unknown" for update in weight_updates if update.loaded is False]
    return loaded, failed


def latest_broadcast(run_dir: Path) -> Path | None:
    """The newest ``broadcasts/step_k`` the trainer finished (its STABLE marker written)."""
    found = []
    for folder in (run_dir / "broadcasts").glob("step_*"):
        suffix = folder.name.removeprefix("step_")
        if suffix.isdigit() and (folder / STABLE).exists():
            found.append((int(suffix), folder))
    return max(found)[1] if found else None


def mean_logprob(model, token_ids: list[int], mask: list[bool]) -> float:
    """Mean log p(token | what precedes it) over the masked positions, at temperature 1."""
    from air.serving.runtime.token_scorer import next_token_logprobs

    positions = [i for i in range(1, len(token_ids)) if mask[i]]
    chosen = next_token_logprobs(model, token_ids, positions) if positions else []
    return sum(chosen) / len(chosen) if chosen else math.nan


def fixed_sample(model_dir: Path, broadcast: Path, step: int, token_ids: list[int], mask: list[bool]) -> FixedSample:
    """The sample's mean logprob under the tiny model and under ``broadcast`` loaded as the server loads it
    (raises BroadcastLoadError when it does not load)."""
    import torch
    from transformers import AutoModelForCausalLM

    from air.serving.runtime.broadcast_loading import ADAPTER_CONFIG, with_full_weights, with_lora_adapter

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    load = with_lora_adapter if (broadcast / ADAPTER_CONFIG).exists() else with_full_weights
    after = load(base, broadcast)
    return FixedSample(
        step=step,
        tokens=sum(1 for trained in mask[1:] if trained),
        logprob_before=mean_logprob(base, token_ids, mask),
        logprob_after=mean_logprob(after, token_ids, mask),
        broadcast=str(broadcast),
    )


def served_sample(
    base_url: str, served: str, adapter: str, token_ids: list[int], mask: list[bool], *, vllm: bool = False
) -> ServedSample:
    """The sample's mean logprob over its trained tokens, as the server computes it under ``served`` and
    ``adapter``: vLLM's ``prompt_logprobs`` on its completions route given the token ids (``vllm``: prime-rl's
    server at either pin), or on the token chat route air's server answers; raises httpx.HTTPError."""
    import httpx

    means = []
    for model in (served, adapter):
        asked = {"model": model, "max_tokens": 1, "temperature": 0, "prompt_logprobs": 0}
        if vllm:
            answer = httpx.post(f"{base_url}/completions", json={**asked, "prompt": token_ids}, timeout=600)
        else:
            tokens = {"messages": [{"role": "user", "content": ""}], "tokens": token_ids}
            answer = httpx.post(f"{base_url}/chat/completions/tokens", json={**asked, **tokens}, timeout=600)
        answer.raise_for_status()
        body = answer.json()
        entries = body["choices"][0]["prompt_logprobs"] if vllm else body["prompt_logprobs"]
        # vLLM's entry for a position holds the chosen token and, when it is not the top one, the top one too.
        chosen = [entries[i][str(token_ids[i])]["logprob"] for i in range(1, len(token_ids)) if mask[i]]
        means.append(sum(chosen) / len(chosen) if chosen else math.nan)
    return ServedSample(served, adapter, means[0], means[1])


def trainer_problems(run: TrainerRun, steps_requested: int) -> list[str]:
    """Why the trainer's run does not show learning, each with its step."""
    found = []
    if len(run.steps) < steps_requested:
        found.append(f"the trainer finished {len(run.steps)} of {steps_requested} steps")
    for step in run.steps:
        at = f"step {step.step}"
        finite = math.isfinite(step.loss)
        if not finite:
            found.append(f"{at}: the loss is {step.loss} (not finite)")
        elif step.loss == 0 and step.step in run.steps_with_gradient:
            found.append(f"{at}: the loss is 0.0 over a batch with non-zero advantages: no reward reached the loss")
        if not math.isfinite(step.grad_norm):
            found.append(f"{at}: the grad norm is {step.grad_norm}")
        if not step.params_finite:
            found.append(f"{at}: a trainable parameter is NaN or inf after the update")
        if step.step not in run.steps_with_gradient:
            continue  # every advantage 0 (equal rewards in each group): no gradient, nothing need change
        if step.changed_tensors == 0 or not step.max_param_change > 0:
            found.append(f"{at}: no trainable parameter changed (frozen, zero learning rate, or no gradient)")
        elif step.changed_tensors < step.trainable_tensors:
            unchanged = step.trainable_tensors - step.changed_tensors
            found.append(f"{at}: {unchanged} of {step.trainable_tensors} trainable tensors did not change")
    found += [f"the server could not load a broadcast: {reason}" for reason in run.broadcast_failures]
    if steps_requested > run.ahead + 1 and not run.broadcasts_loaded and not run.broadcast_failures:
        found.append("the server loaded no broadcast: the orchestrator never asked for the trainer's weights")
    sample = run.fixed_sample
    if sample is None:
        found.append("no broadcast to measure the fixed sample under: the trainer published no weights")
    elif not (math.isfinite(sample.logprob_after) and sample.changed):
        found.append(
            f"the fixed sample's mean logprob did not move ({sample.logprob_before:.6f} -> {sample.logprob_after:.6f})"
        )
    return found


__all__ = [
    "FixedSample",
    "ServedSample",
    "TrainerRun",
    "TrainerStep",
    "broadcast_loads",
    "fixed_sample",
    "latest_broadcast",
    "served_sample",
    "read_steps",
    "trainer_problems",
]
