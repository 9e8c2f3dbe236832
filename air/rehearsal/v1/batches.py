"""What today's prime-rl orchestrator handed its trainer, read back and checked against its episodes.

Batches: ``<run>/rollouts/step_k/rank_r.bin`` (k from 1), msgpack written by msgspec from
``list[prime_rl.transports.rollouts.types.MicroBatch]`` with ``array_like=True`` and
``omit_defaults=True``: each micro batch is a positional array ``[input_ids, loss_mask, advantages,
inference_logprobs, position_ids, sequence_lengths, temperatures, env_names, seq_lens, ...]`` packing
several samples back to back (``sequence_lengths``; padding extends the last one, masked out).

Episodes: the orchestrator's file monitor writes every finished episode of a step's window to
``<run>/rollouts/step_k/train/all/traces.jsonl`` (``vf.Episode``: its source's name, its group, its
traces; a trace is a message graph whose nodes carry token ids and the sampled mask). A sample is one
root-to-leaf branch of a trace, so each one is matched back to its trace by its tokens, and then its
loss mask and advantages are checked against what the trace says: only sampled tokens trained, and
GRPO's advantage, reward minus the mean reward of the group's clean traces (errored traces are left out
of both, prime-rl main's rule). Read with plain ``msgpack`` and JSON: this runs without prime-rl.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air.rehearsal.figures import BatchFigures, BatchFormatError
from air.rehearsal.live_trainer import TrainedSample
from air.rehearsal.v1.branches import branch_causes

MICRO_BATCH_FIELDS = ("input_ids", "loss_mask", "advantages", "inference_logprobs", "position_ids")


@dataclass
class V1Sample:
    step: int
    env_name: str
    token_ids: list[int]
    loss_mask: list[bool]
    advantages: list[float]

    def trained_advantages(self) -> list[float]:
        return [a for a, m in zip(self.advantages, self.loss_mask, strict=False) if m]


@dataclass
class V1Trace:
    step: int
    source: str
    group: str
    ok: bool
    reward: float
    branches: list[tuple[list[int], list[bool]]]  # (token ids, the mask prime-rl trains on)
    nodes: list[dict[str, Any]] = field(default_factory=list)  # the message graph, for its branch points

    @property
    def sampled(self) -> bool:
        return any(any(mask) for _, mask in self.branches)


def read_micro_batches(path: Path, step: int) -> list[V1Sample]:
    import msgpack

    try:
        raw = msgpack.unpackb(path.read_bytes(), raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise BatchFormatError(f"{path}: not msgpack ({exc})") from exc
    if not isinstance(raw, list):
        raise BatchFormatError(f"{path}: expected a list of micro batches, got {type(raw).__name__}")
    samples = []
    for index, batch in enumerate(raw):
        if not (isinstance(batch, list) and len(batch) >= 9 and all(isinstance(batch[i], list) for i in range(9))):
            raise BatchFormatError(f"{path}: micro batch {index} is not a positional MicroBatch")
        input_ids, loss_mask, advantages, _, _, lengths, _, env_names, _ = batch[:9]
        if not (len(input_ids) == len(loss_mask) == len(advantages) == len(env_names) == sum(lengths)):
            raise BatchFormatError(f"{path}: micro batch {index}: its streams and sequence_lengths disagree")
        start = 0
        for length in lengths:
            end = start + length
            samples.append(
                V1Sample(step, env_names[start], input_ids[start:end], loss_mask[start:end], advantages[start:end])
            )
            start = end
    return samples


def read_traces(path: Path, step: int) -> list[V1Trace]:
    """The traces of one step's episodes file (missing: none)."""
    try:
        lines = path.read_text().splitlines()
    except FileNotFoundError:
        return []
    traces = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            episode = json.loads(line)
            source, group = episode["env"]["name"], episode["group"]["id"]
            for trace in episode["traces"]:
                rewards = trace.get("rewards") or {}
                reward = sum(r["score"] * r.get("weight", 1.0) for r in rewards.values() if r)
                ok = bool(trace.get("ok")) and bool(episode.get("ok", True))
                nodes = trace["nodes"]
                traces.append(V1Trace(step, source, group, ok, reward, branches_of(nodes), nodes))
            if not episode["traces"]:  # failed before any trace: an errored rollout of its group
                traces.append(V1Trace(step, source, group, False, 0.0, []))
        except (ValueError, KeyError, TypeError) as exc:
            raise BatchFormatError(f"{path}:{number}: not an episode record ({exc!r})") from exc
    return traces


def branches_of(nodes: list[dict[str, Any]]) -> list[tuple[list[int], list[bool]]]:
    """Root-to-leaf paths in leaf order, each with the mask prime-rl trains on: a sampled node shared
    by several branches is trained in the first one only (``iter_trainable_branches``)."""
    parents = {node.get("parent") for node in nodes}
    trained: set[int] = set()
    branches = []
    for leaf in (i for i in range(len(nodes)) if i not in parents):
        path, at = [], leaf
        while at is not None:
            path.append(at)
            at = nodes[at].get("parent")
        tokens: list[int] = []
        mask: list[bool] = []
        for index in reversed(path):
            node = nodes[index]
            node_mask = [bool(m) for m in node.get("mask") or [False] * len(node.get("token_ids") or [])]
            if any(node_mask) and index in trained:
                node_mask = [False] * len(node_mask)
            elif any(node_mask):
                trained.add(index)
            tokens += node.get("token_ids") or []
            mask += node_mask
        branches.append((tokens, mask))
    return branches


def v1_figures(
    samples: list[V1Sample],
    traces: list[V1Trace],
    special_ids: set[int],
    check_advantages: bool = True,
    tolerance: float = 1e-5,
    decode: Any = None,
) -> BatchFigures:
    """``special_ids``: tokens a model turn never trains on but an env turn starts with (ChatML's
    ``<|im_start|>``). ``check_advantages``: GRPO without length shaping, whose rule is checked.
    ``decode``: token ids -> text (special tokens kept), to tell the branch points' causes."""
    groups: dict[str, list[V1Trace]] = {}
    for trace in traces:
        groups.setdefault(trace.group, []).append(trace)
    expected: dict[int, float] = {}
    for members in groups.values():
        clean = [t for t in members if t.ok and t.sampled]
        mean = sum(t.reward for t in clean) / len(clean) if clean else 0.0
        for trace in clean:
            expected[id(trace)] = trace.reward - mean
    # Equal token sequences happen (the same first turns in two traces of a task): keep every candidate.
    by_tokens: dict[tuple[int, ...], list[tuple[V1Trace, list[bool]]]] = {}
    for trace in traces:
        for tokens, mask in trace.branches:
            by_tokens.setdefault(tuple(tokens), []).append((trace, mask))
    problems: list[str] = []
    advantages_ok = True
    by_source: dict[str, dict[str, int]] = {}
    for trace in traces:
        by_source.setdefault(trace.source, {"rollouts": 0, "samples": 0})["rollouts"] += 1
    for sample in samples:
        where = f"step {sample.step} ({sample.env_name})"
        by_source.setdefault(sample.env_name, {"rollouts": 0, "samples": 0})["samples"] += 1
        candidates = _match(sample, by_tokens)
        if not candidates:
            problems.append(f"{where}: a sample matches no trace's tokens")
            continue
        if not any(_same_mask(sample, mask) for _, mask in candidates):
            problems.append(f"{where}: the loss mask differs from the trace's sampled tokens")
        trained = {t for t, m in zip(sample.token_ids, sample.loss_mask, strict=False) if m}
        if special_ids & trained:
            problems.append(f"{where}: env turn tokens (chat-template markers) in the loss mask")
        if not any(sample.loss_mask):
            problems.append(f"{where}: a sample with no token to train on")
        got = sample.trained_advantages()
        wanted = [expected.get(id(trace)) for trace, _ in candidates]
        if check_advantages and not any(
            want is not None and all(math.isclose(a, want, abs_tol=tolerance) for a in got) for want in wanted
        ):
            advantages_ok = False
    zero_groups = 0
    for members in groups.values():
        values = [expected[id(t)] for t in members if id(t) in expected]
        zero_groups += all(abs(v) <= tolerance for v in values)
    steps = {s.step for s in samples}
    branch_points: Counter[str] = Counter()
    for trace in traces:
        branch_points += branch_causes(trace.nodes, decode or (lambda ids: " ".join(map(str, ids))))
    return BatchFigures(
        steps=len(steps),
        samples=len(samples),
        rollouts=len(traces),
        masked=sum(not t.ok for t in traces),
        masked_samples=sum(not any(s.loss_mask) for s in samples),
        reward_mean=sum(t.reward for t in traces) / len(traces) if traces else 0.0,
        advantage_nonzero_share=(
            sum(any(abs(a) > tolerance for a in s.trained_advantages()) for s in samples) / len(samples)
            if samples
            else 0.0
        ),
        groups=len(groups),
        zero_advantage_groups=zero_groups,
        advantages_match_rewards=advantages_ok,
        rollouts_without_samples=sum(not t.sampled for t in traces),
        loss_mask_ok=not problems,
        loss_mask_problems=problems[:10],
        samples_per_rollout=len(samples) / len(traces) if traces else 0.0,
        loss_tokens=sum(sum(s.loss_mask) for s in samples),
        by_source=by_source,
        branch_points=dict(sorted(branch_points.items())),
        branches_per_rollout=(
            sum(len(t.branches) for t in traces if t.sampled) / sum(t.sampled for t in traces)
            if any(t.sampled for t in traces)
            else 0.0
        ),
    )


def trained_samples(samples: list[V1Sample]) -> list[TrainedSample]:
    """The samples (one packed sequence each) as the trainer trains on them."""
    return [
        TrainedSample(s.step, list(s.token_ids), [bool(m) for m in s.loss_mask], any(s.trained_advantages()))
        for s in samples
    ]


def _same_mask(sample: V1Sample, mask: list[bool]) -> bool:
    return sample.loss_mask[: len(mask)] == mask[: len(sample.loss_mask)] and not any(sample.loss_mask[len(mask) :])


def _match(sample: V1Sample, by_tokens: dict) -> list[tuple[V1Trace, list[bool]]]:
    """The branches a sample may come from: its tokens exactly, else the branch its tokens start with
    (the packer padded the sample) or that starts with them (the trainer's cut at ``seq_len``)."""
    exact = by_tokens.get(tuple(sample.token_ids))
    if exact:
        return exact
    size = len(sample.token_ids)
    for tokens, found in by_tokens.items():
        padded = len(tokens) < size and not any(sample.loss_mask[len(tokens) :])
        if padded and list(tokens) == sample.token_ids[: len(tokens)]:
            return found
    return [
        found
        for tokens, many in by_tokens.items()
        if len(tokens) > size and list(tokens[:size]) == sample.token_ids
        for found in many
    ]
