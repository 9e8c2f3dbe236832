"""Scores -> reward.

The delta reward: every evaluation earns the improvement of its score over the previous
evaluated score (the first one is compared with the task's baseline), in the metric's direction
and normalised so that tasks with different metrics are comparable:

    progress(s) = clip(sign * (s - baseline) / scale, -clip, +clip)
        sign  = +1 if higher is better else -1
        scale = |baseline| ("relative", default; 1 when the baseline is 0 or unknown) or 1 ("absolute")
    step reward at evaluation k = progress(s_k) - progress(s_{k-1}),   progress(s_0) = 0

The step rewards telescope: their sum is progress(last evaluated score). A rollout that ends
with an unevaluated workspace is evaluated once more at the end, so an agent that never types
``validate`` still earns its score. The rollout reward, the only number the trainer sees:

    reward = sum(step rewards) - format_error_penalty * format_errors
             - (clip + no_score_penalty) (if no evaluation of the rollout ever produced a score)

No score at all earns less than the worst honest score (-clip): no way out of an evaluation (a missing
submission, a crash, NaN predictions, a rejected forgery) pays better than submitting a bad answer. A rollout
the agent ends by breaking its own sandbox (no shell can start: ``forfeit``) earns the same, whatever it scored.

A failed evaluation (no submission, a crash, unparsable output) earns nothing and does not move
the reference score; nor does a suspicious one (a score the metric cannot reach: a forgery), which
is also counted apart (``suspicious_evaluations``). Per-step rewards are for logging: prime-rl
trains on the rollout reward.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field


class RewardSettings(BaseModel):
    """How scores become reward (the ``reward`` table of the env's arguments)."""

    model_config = ConfigDict(extra="forbid")

    scale: Literal["relative", "absolute"] = Field(
        default="relative",
        description="'relative': improvements are fractions of |baseline| (comparable across tasks); "
        "'absolute': raw metric units.",
    )
    clip: float = Field(default=1.0, gt=0, description="Bound on |progress| so one lucky metric cannot dominate.")
    format_error_penalty: float = Field(default=0.02, ge=0, description="Subtracted per malformed reply.")
    no_score_penalty: float = Field(
        default=0.1,
        ge=0,
        description="When no evaluation of the rollout produced a score, the reward is -(clip + this): below the "
        "worst honest score.",
    )


@dataclass
class RewardTracker:
    """Follows one rollout's evaluations and turns them into step rewards and metrics."""

    baseline: float | None
    higher_is_better: bool = True
    settings: RewardSettings = field(default_factory=RewardSettings)
    scores: list[float] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    failed_evaluations: int = 0
    suspicious_evaluations: int = 0  # a forged-looking result (outside the metric's range): earns nothing
    forfeited: bool = False  # the agent made its sandbox unusable (no shell starts): the no-score reward
    _progress: float = 0.0

    def progress(self, score: float) -> float:
        """Normalised improvement of ``score`` over the baseline, in the metric's direction."""
        if self.baseline is None or not math.isfinite(self.baseline):
            return 0.0  # nothing to compare with: scores are logged, not rewarded
        sign = 1.0 if self.higher_is_better else -1.0
        scale = abs(self.baseline) if self.settings.scale == "relative" and self.baseline != 0 else 1.0
        value = sign * (score - self.baseline) / scale
        return max(-self.settings.clip, min(self.settings.clip, value))

    def record(self, score: float | None, suspicious: bool = False) -> float:
        """Record one evaluation; returns its step reward (0 for a failed or suspicious one)."""
        if suspicious:
            self.suspicious_evaluations += 1
        if suspicious or score is None or not math.isfinite(score):
            self.failed_evaluations += 1
            return 0.0
        self.scores.append(score)
        new = self.progress(score)
        reward, self._progress = new - self._progress, new
        self.step_rewards.append(reward)
        return reward

    @property
    def evaluations(self) -> int:
        return len(self.scores) + self.failed_evaluations

    @property
    def best_score(self) -> float | None:
        if not self.scores:
            return None
        return max(self.scores) if self.higher_is_better else min(self.scores)

    @property
    def final_score(self) -> float | None:
        return self.scores[-1] if self.scores else None

    def forfeit(self) -> None:
        """The agent ended its own rollout by breaking its sandbox: whatever it scored, it earns what no score
        earns (breaking the sandbox must never pay better than a bad answer, nor be masked)."""
        self.forfeited = True

    def rollout_reward(self, format_errors: int = 0) -> float:
        reward = sum(self.step_rewards) - self.settings.format_error_penalty * format_errors
        if self.forfeited:
            reward -= sum(self.step_rewards)
        if self.forfeited or not self.scores:
            reward -= self.settings.clip + self.settings.no_score_penalty
        return reward

    def metrics(self) -> dict[str, float]:
        """Numbers for ``state["metrics"]`` (never NaN: trainers average them)."""
        baseline = self.baseline if self.baseline is not None else 0.0
        return {
            "baseline_score": baseline,
            "best_score": self.best_score if self.best_score is not None else baseline,
            "final_score": self.final_score if self.final_score is not None else baseline,
            "improvement": self._progress,
            "scored": 1.0 if self.scores else 0.0,
            "failed_evaluations": float(self.failed_evaluations),
            "suspicious_evaluations": float(self.suspicious_evaluations),
        }
