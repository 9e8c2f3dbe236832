"""What the batches prime-rl's orchestrator handed its trainer say, one type for both generations (each
generation's ``batches`` module reads its own format and fills it), and the error a batch it cannot read
raises."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

CHAT_MARKERS = ("<|im_start|>", "<|endoftext|>")


class BatchFormatError(ValueError):
    """A batch file that is not the layout its reader knows (prime-rl moved?)."""


@dataclass
class BatchFigures:
    steps: int
    samples: int
    rollouts: int
    masked: int  # rollouts with nothing to train on (errored; v1 drops them)
    masked_samples: int
    reward_mean: float
    advantage_nonzero_share: float
    groups: int
    zero_advantage_groups: int
    advantages_match_rewards: bool  # advantage == reward - mean(group rewards), prime-rl's rule at each pin
    rollouts_without_samples: int  # failed before their first model turn: no sample
    loss_mask_ok: bool
    loss_mask_problems: list[str]
    samples_per_rollout: float
    loss_tokens: int
    # v1 only (its batches name their source and its traces show their branch points)
    by_source: dict[str, dict[str, int]] = field(default_factory=dict)
    branch_points: dict[str, int] = field(default_factory=dict)  # by cause (v1.branches)
    branches_per_rollout: float | None = None  # samples a rollout makes before zero-advantage samples are dropped


def chat_markers(model_dir: Path) -> tuple[set[int], object]:
    """(the token ids a model turn never trains on but an env turn starts with, the tiny model's tokenizer)."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    return {tokenizer.convert_tokens_to_ids(token) for token in CHAT_MARKERS}, tokenizer
