"""The rehearsal's findings: one report for either prime-rl generation, with the same keys."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from air.rehearsal.figures import BatchFigures
from air.rehearsal.trainer_report import TrainerRun, trainer_problems


@dataclass
class RehearsalReport:
    config: str
    output_dir: str
    steps_requested: int
    steps_completed: int
    rollouts: int
    masked: int
    samples: int
    reward_mean: float
    advantage_nonzero_share: float
    zero_advantage_groups: int
    loss_mask_ok: bool
    samples_per_rollout: float
    seconds_per_step: float
    trajectory_strategy: str
    groups: int
    masked_samples: int
    advantages_match_rewards: bool
    rollouts_without_samples: int
    loss_tokens: int
    weight_updates: int
    trainer_errors: list[str] = field(default_factory=list)
    loss_mask_problems: list[str] = field(default_factory=list)
    env_metrics: dict[str, float] = field(default_factory=dict)
    orchestrator_metrics: dict[str, float] = field(default_factory=dict)
    dropped: list[str] = field(default_factory=list)
    generation: str = "classic"  # prime-rl c87c19b ("classic") or today's ("v1")
    prime_rl_commit: str = ""
    engine: str = ""  # who served the orchestrator: prime-rl's vLLM, or air's server (rehearse.engine_name)
    env_servers: list[dict[str, Any]] = field(default_factory=list)  # v1: per source, where and how many
    # v1: each branch point of the traces by cause (v1/branches); a branch is one more training sample
    branch_points: dict[str, int] = field(default_factory=dict)
    branches_per_rollout: float | None = None  # v1: samples per rollout before zero-advantage ones are dropped
    # Episodes the env ran (a trajectory each, from this machine's env servers or workers) and those the
    # orchestrator cancelled mid-run: work thrown away. v1 splits them by prime-rl's reason, from its log:
    # past max_off_policy_steps (stale) and in flight when the last batch shipped (the final drain).
    # seconds_per_step counts from the first rollout to the last batch; what came before is startup_s
    startup_s: float | None = None
    wall_s: float = 0.0
    dispatched: int = 0
    cancelled: int = 0
    cancelled_stale: int | None = None
    cancelled_at_end: int | None = None
    trainer_run: TrainerRun | None = None  # --trainer: what prime-rl's real trainer did, per step

    @property
    def cancelled_share(self) -> float:
        return self.cancelled / self.dispatched if self.dispatched else 0.0

    def as_dict(self) -> dict[str, Any]:
        figures = {**asdict(self), "cancelled_share": self.cancelled_share}
        if self.trainer_run is not None and self.trainer_run.fixed_sample is not None:
            figures["trainer_run"]["fixed_sample"]["changed"] = self.trainer_run.fixed_sample.changed
        return {**figures, "problems": self.problems(), "warnings": self.warnings()}

    def problems(self) -> list[str]:
        """What would make the GPU run useless: nothing reaches the trainer, or nothing it could learn."""
        found = []
        if self.samples == 0:
            found.append("no sample reached the trainer")
        elif self.advantage_nonzero_share == 0:
            found.append("every advantage is 0: the loss would stay 0.0 (rewards equal within every group)")
        if self.rollouts and self.masked == self.rollouts:
            found.append("every rollout was masked (each one errored)")
        if not self.loss_mask_ok:
            found.append("the loss mask covers tokens it must not: " + "; ".join(self.loss_mask_problems[:3]))
        if not self.advantages_match_rewards:
            found.append("advantages do not equal reward minus the group mean")
        found += [f"the trainer would fail: {error}" for error in self.trainer_errors]
        if self.trainer_run is not None:
            found += trainer_problems(self.trainer_run, self.steps_requested)
        return found

    def warnings(self) -> list[str]:
        found = []
        if self.masked:
            found.append(f"{self.masked} of {self.rollouts} rollouts masked (errored): see their trajectories")
        if self.rollouts_without_samples:
            counted = "still counts" if self.generation == "classic" else "leaves out"
            found.append(
                f"{self.rollouts_without_samples} rollouts failed before their first model turn (no sample; "
                f"prime-rl {counted} their reward in their group's mean): see the trajectories' errors"
            )
        if self.zero_advantage_groups:
            found.append(f"{self.zero_advantage_groups} of {self.groups} groups teach nothing (equal rewards)")
        if self.cancelled_share > CANCELLED_SHARE_WARNING:
            fix = (
                "raise orchestrator.max_off_policy_steps, or lower orchestrator.concurrency.max_inflight"
                if self.generation == "v1"
                else "prime-rl c87c19b cancels the rollouts still running when it stops: a one-time cost per run"
            )
            found.append(
                f"{self.cancelled} of {self.dispatched} episodes were cancelled after the env ran them "
                f"({self.cancelled_share:.0%}): {fix}"
            )
        return found


CANCELLED_SHARE_WARNING = 0.10

BATCH_FIGURES = (  # the batch figures' fields the report carries under the same names
    "rollouts",
    "masked",
    "samples",
    "reward_mean",
    "advantage_nonzero_share",
    "zero_advantage_groups",
    "loss_mask_ok",
    "samples_per_rollout",
    "groups",
    "masked_samples",
    "advantages_match_rewards",
    "rollouts_without_samples",
    "loss_tokens",
    "loss_mask_problems",
    "branch_points",
    "branches_per_rollout",
)


def step_timing(
    first_started: float | None, trainer: list[dict[str, Any]], launched_at: float, elapsed: float, steps: int
) -> dict[str, float | None]:
    """``seconds_per_step``: from the first rollout's start to the last batch the stand-in trainer
    received, per step: the work that repeats every step. ``startup_s``: from launching prime-rl's
    processes to the first rollout (imports, env servers, the first containers), once per run.
    Without a rollout or a received batch to time, the whole wall time per step and no start-up."""
    received = [entry["received_at"] for entry in trainer if "received_at" in entry]
    first, per_step = first_started, max(steps, 1)
    if first is None or not received or max(received) <= first or first < launched_at:
        return {"seconds_per_step": elapsed / per_step, "startup_s": None, "wall_s": elapsed}
    return {"seconds_per_step": (max(received) - first) / per_step, "startup_s": first - launched_at, "wall_s": elapsed}


def report_from(
    batch: BatchFigures, trainer: list[dict[str, Any]], elapsed: float, launched_at: float, episodes: Any, **rest: Any
) -> RehearsalReport:
    """A report from either generation's batch figures, the stand-in
    trainer's lines, the run's wall time from ``launched_at``, the episodes the env ran (``launch.Episodes``)
    and the rest of the report's fields."""
    return RehearsalReport(
        steps_completed=batch.steps,
        trainer_errors=[f"step {t['step']}: {t['error']}" for t in trainer if "error" in t],
        dispatched=episodes.dispatched,
        cancelled=episodes.cancelled,
        **step_timing(episodes.first_started, trainer, launched_at, elapsed, batch.steps),
        **{name: getattr(batch, name) for name in BATCH_FIGURES},
        **rest,
    )
