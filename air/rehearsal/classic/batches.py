"""What prime-rl c87c19b's orchestrator handed its trainer, read back and summarised.

The orchestrator writes each step's batch to ``<output_dir>/rollouts/step_k/rollouts.bin``: msgpack,
written by msgspec from ``prime_rl.transport.types.TrainingBatch`` with ``array_like=True`` and
``omit_defaults=True``, so each struct is a positional array whose trailing defaults may be missing:
``[examples, step, run_idx?]``, an example being ``[prompt_ids, prompt_mask, completion_ids,
completion_mask, completion_logprobs, completion_temperatures, teacher_logprobs?, advantage?, reward?,
...]``. Read with plain ``msgpack`` here, so this runs without prime-rl.

Samples carry no rollout id. Rollouts are recovered from their order (a group's rollouts are
contiguous, each rollout's samples too): under "branching" a sample continues the previous one when
its prompt strictly extends the previous prompt (the env only appends) with the same reward and
advantage; under "interleaved" each sample is one rollout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air.rehearsal.figures import BatchFigures, BatchFormatError
from air.rehearsal.live_trainer import TrainedSample

SAMPLE_FIELDS = (
    "prompt_ids",
    "prompt_mask",
    "completion_ids",
    "completion_mask",
    "completion_logprobs",
    "completion_temperatures",
    "teacher_logprobs",
    "advantage",
    "reward",
)


@dataclass
class Sample:
    step: int
    prompt_ids: list[int]
    prompt_mask: list[bool]
    completion_ids: list[int]
    completion_mask: list[bool]
    completion_logprobs: list[float]
    completion_temperatures: list[float]
    advantage: float | None
    reward: float | None

    @property
    def masked(self) -> bool:
        """Nothing of it is trained on (prime-rl masks the completions of a rollout that errored)."""
        return not any(self.completion_mask)


@dataclass
class Rollout:
    samples: list[Sample] = field(default_factory=list)

    @property
    def reward(self) -> float:
        return self.samples[0].reward or 0.0

    @property
    def advantage(self) -> float:
        return self.samples[0].advantage or 0.0


def read_batch(path: Path) -> tuple[int, list[Sample]]:
    import msgpack

    try:
        raw = msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise BatchFormatError(f"{path}: not msgpack ({exc})") from exc
    if not (isinstance(raw, list) and len(raw) >= 2 and isinstance(raw[0], list) and isinstance(raw[1], int)):
        raise BatchFormatError(f"{path}: expected [examples, step, ...], got {type(raw).__name__}")
    step = raw[1]
    samples = []
    for index, example in enumerate(raw[0]):
        if not isinstance(example, list) or len(example) < 6:
            raise BatchFormatError(f"{path}: example {index} is not a positional TrainingSample")
        values: dict[str, Any] = dict(zip(SAMPLE_FIELDS, example + [None] * len(SAMPLE_FIELDS), strict=False))
        values.pop("teacher_logprobs")
        samples.append(Sample(step=step, **values))
    return step, samples


def split_rollouts(samples: list[Sample], strategy: str) -> list[Rollout]:
    rollouts: list[Rollout] = []
    for sample in samples:
        if rollouts and strategy == "branching" and _continues(rollouts[-1].samples[-1], sample):
            rollouts[-1].samples.append(sample)
        else:
            rollouts.append(Rollout([sample]))
    return rollouts


def split_groups(rollouts: list[Rollout], group_size: int, tolerance: float = 1e-6) -> list[list[Rollout]]:
    """Consecutive rollouts of one group share ``reward - advantage`` (their group's mean reward). A
    rollout that failed before its first model turn has no sample but still counts in that mean: its
    group comes out short here, and only complete groups can be checked against prime-rl's rule."""
    groups: list[list[Rollout]] = []
    for rollout in rollouts:
        baseline = rollout.reward - rollout.advantage
        current = groups[-1] if groups else None
        if (
            current
            and len(current) < group_size
            and math.isclose(current[0].reward - current[0].advantage, baseline, abs_tol=tolerance)
        ):
            current.append(rollout)
        else:
            groups.append([rollout])
    return groups


def _continues(previous: Sample, sample: Sample) -> bool:
    longer = len(sample.prompt_ids) > len(previous.prompt_ids)
    extends = longer and sample.prompt_ids[: len(previous.prompt_ids)] == previous.prompt_ids
    return extends and sample.reward == previous.reward and sample.advantage == previous.advantage


def figures(
    batches: list[list[Sample]],
    strategy: str,
    group_size: int,
    special_ids: set[int],
    batch_size: int | None = None,
    tolerance: float = 1e-6,
) -> BatchFigures:
    """``special_ids``: token ids a model turn never trains on but an env turn starts with (ChatML's
    ``<|im_start|>``): finding one under the loss mask means env text would be trained on."""
    all_samples = [s for batch in batches for s in batch]
    batch_size = batch_size or group_size
    rollouts, groups = [], []
    for batch in batches:
        step_rollouts = split_rollouts(batch, strategy)
        rollouts += step_rollouts
        if len(step_rollouts) == batch_size:  # none missing: groups are plain chunks, checked strictly
            groups += [step_rollouts[i : i + group_size] for i in range(0, batch_size, group_size)]
        else:
            groups += split_groups(step_rollouts, group_size, tolerance)
    complete = [g for g in groups if len(g) == group_size]
    problems = []
    for sample in all_samples:
        where = f"step {sample.step}"
        if any(sample.prompt_mask):
            problems.append(f"{where}: prompt tokens in the loss mask")
        if len(sample.completion_mask) != len(sample.completion_ids):
            problems.append(f"{where}: completion mask and ids differ in length")
        trained = [t for t, m in zip(sample.completion_ids, sample.completion_mask, strict=False) if m]
        if special_ids & set(trained):
            problems.append(f"{where}: env turn tokens (chat-template markers) in the loss mask")
        if not sample.masked and not trained:
            problems.append(f"{where}: an unmasked sample with no token to train on")
    matches = all(
        all(math.isclose(r.advantage, r.reward - _mean([x.reward for x in g]), abs_tol=tolerance) for r in g)
        for g in complete
    )
    return BatchFigures(
        steps=len(batches),
        samples=len(all_samples),
        rollouts=len(rollouts),
        masked=sum(all(s.masked for s in r.samples) for r in rollouts),
        masked_samples=sum(s.masked for s in all_samples),
        reward_mean=_mean([r.reward for r in rollouts]),
        advantage_nonzero_share=_share([abs(s.advantage or 0.0) > tolerance for s in all_samples]),
        groups=len(groups),
        zero_advantage_groups=sum(all(abs(r.advantage) <= tolerance for r in g) for g in groups),
        rollouts_without_samples=sum(group_size - len(g) for g in groups),
        advantages_match_rewards=matches,
        loss_mask_ok=not problems,
        loss_mask_problems=problems[:10],
        samples_per_rollout=len(all_samples) / len(rollouts) if rollouts else 0.0,
        loss_tokens=sum(sum(s.completion_mask) for s in all_samples),
    )


def trained_samples(batches: list[list[Sample]]) -> list[TrainedSample]:
    """The samples (prompt and completion apart) as whole sequences, as the trainer trains on them."""
    return [
        TrainedSample(
            sample.step,
            [*sample.prompt_ids, *sample.completion_ids],
            [False] * len(sample.prompt_ids) + [bool(m) for m in sample.completion_mask],
            bool(sample.advantage) and any(sample.completion_mask),
        )
        for batch in batches
        for sample in batch
    ]


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def _share(flags: list[bool]) -> float:
    return sum(flags) / len(flags) if flags else 0.0
