"""Each rollout's evaluation seed: the same for every rollout of a group, unseen by the agent.

MLGym's games (and any evaluator that draws from ``random`` or ``numpy.random`` unseeded) score the same
submission differently from one evaluation to the next: within a GRPO group that noise is a gradient.
So every rollout of a group evaluates under one seed, derived here on the host from the env's ``seed``
and the group; the evaluation passes it to the evaluator out of the agent's sight (tasks/workspace,
scripts/eval_runner.py) and the trajectory records it, so ``air replay`` reproduces the scores.

What a group is depends on who runs the env:
- ``air standalone`` (and any runner that sets ``info.group_id``): the group's own id.
- prime-rl c87c19b (classic ``env.run_group``) and today's prime-rl (v1 ``env.run(task_data)``) hand the
  env no group key: a group is ``rollouts_per_example`` copies of one example, so the key is the example.
  Rollouts of one group share their seed; so do the groups of the same example at other steps.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from typing import Any

from air.env.settings import MLGymEnvSettings


def group_key(info: Mapping[str, Any] | None, example_id: Any) -> str:
    """The key a group's rollouts share: the runner's group id, else the dataset example."""
    group_id = (info or {}).get("group_id")
    return f"group/{group_id}" if group_id is not None else f"example/{example_id}"


def rollout_seed(settings: MLGymEnvSettings, task_name: str, key: str) -> int:
    """The evaluation seed of a rollout of ``task_name`` in group ``key`` (64 bits: the agent's code sees a 32-bit
    seed derived from each evaluation's, and 2^32 guesses must not lead back to this one)."""
    if settings.evaluation_seed is not None:
        return settings.evaluation_seed
    digest = hashlib.sha256(f"air-group/{settings.seed}/{task_name}/{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")
