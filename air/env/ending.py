"""The end of every rollout, whichever front ran it: closed (how it ended, reward and metrics, its container
gone), recorded (the trajectory), saved. :meth:`RolloutEnding.end` is the one call a front makes;
``close``, ``record`` and ``save`` stay callable on their own (a run's interruption records a rollout it
never played)."""

from __future__ import annotations

import asyncio
import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from air.env import trajectories
from air.env.rollout import CANCELLED, EndReason, Rollout, end_reason
from air.env.settings import MLGymEnvSettings
from air.env.trajectories import BaselineInfo, TrajectoryRecord, error_chain, error_line
from air.sandbox.config import SandboxConfig
from air.sandbox.removal import destroy_in_background

log = logging.getLogger(__name__)


@dataclass
class RolloutLabels:
    """What the front knows of a rollout that the core does not: written into its trajectory."""

    id: str = field(default_factory=lambda: secrets.token_hex(16))
    example_id: int | None = None
    group_id: str | None = None
    step: int | None = None
    model: str | None = None
    policy: str | None = None
    sampling_args: dict[str, Any] = field(default_factory=dict)
    system_prompt: str | None = None
    task_prompt: str | None = None


@dataclass(frozen=True)
class Ended:
    """A rollout's end: how (``reason``, its record's exit_status), its reward and metrics (``result``), its
    trajectory, and where that was saved (None: not saved)."""

    reason: EndReason
    result: dict[str, float]
    record: TrajectoryRecord
    path: Path | None


class RolloutEnding:
    """The ending steps of :class:`air.env.core.MLGymCore`, which provides what they read."""

    settings: MLGymEnvSettings
    sandbox_config: SandboxConfig
    task_root: Path
    trajectory_dir: Path | None
    cancel_cause: str | None  # why the run is stopping, set by its driver: a cancelled record's error

    async def end(
        self,
        rollout: Rollout,
        labels: RolloutLabels,
        *,
        cancelled: bool,
        error: object | None = None,
        chain_of: BaseException | None = None,
        stop: str = "",
    ) -> Ended:
        """Close, record and save the rollout. ``cancelled``: cut short (no reward); ``error``: the fault that
        failed it, as the record says it (an exception or its line; ``chain_of``: the exception whose chain is
        recorded, default ``error``); ``stop``: the classic front's verifiers stop condition."""
        result = self.close(rollout, cancelled=cancelled, error=error, stop=stop)
        record = self.record(rollout, result, labels, error, chain_of)
        reason = rollout.exit_status or EndReason.UNKNOWN
        return Ended(reason, result, record, await self.save(record))

    def close(self, rollout: Rollout, *, cancelled: bool, error: object | None, stop: str = "") -> dict[str, float]:
        """How the rollout ended, its reward and metrics; its container goes (in the background)."""
        rollout.finished = True
        rollout.exit_status = end_reason(rollout, cancelled=cancelled, error=error, stop=stop)
        if rollout.sandbox is not None:
            destroy_in_background(rollout.sandbox)
        return self.result(rollout)

    def result(self, rollout: Rollout) -> dict[str, float]:
        metrics = rollout.tracker.metrics()
        metrics.update(
            validates=float(rollout.validates),
            format_errors=float(rollout.format_errors),
            timeouts=float(rollout.timeouts),
            turns=float(rollout.handled),
            submitted=float(rollout.submitted),
        )
        metrics["reward"] = rollout.tracker.rollout_reward(rollout.format_errors)
        return metrics

    def record(
        self,
        rollout: Rollout,
        result: Mapping[str, float],
        labels: RolloutLabels,
        error: object | None,
        chain_of: BaseException | None = None,
    ) -> TrajectoryRecord:
        """``error`` is the one line the record shows; the chain comes from ``chain_of`` (default: ``error``
        when it is an exception)."""
        if chain_of is None and isinstance(error, BaseException):
            chain_of = error
        if rollout.exit_status == EndReason.CANCELLED and error is None:  # cut short: any reward would be made up
            error = self.cancel_cause or CANCELLED
        task = rollout.task
        finished = datetime.now(UTC)
        return TrajectoryRecord(
            id=labels.id,
            task=task.name,
            task_id=task.id,
            example_id=labels.example_id,
            group_id=labels.group_id,
            step=labels.step,
            model=labels.model,
            policy=labels.policy,
            sampling_args=labels.sampling_args,
            image=self.sandbox_config.resolved_image(),
            task_root=str(self.task_root),
            env_settings=self.settings.model_dump(mode="json"),
            system_prompt=labels.system_prompt,
            task_prompt=labels.task_prompt,
            started_at=rollout.started_at,
            finished_at=finished,
            duration_s=(finished - rollout.started_at).total_seconds(),
            exit_status=str(rollout.exit_status or EndReason.UNKNOWN),
            error=error_line(error),
            error_chain=error_chain(chain_of),
            baseline=BaselineInfo.of(task),
            final_evaluation=rollout.final_evaluation,
            evaluation_seed=rollout.evaluation_seed,
            reward=None if error is not None else result["reward"],
            metrics={k: v for k, v in result.items() if k != "reward"},
            turns=rollout.turns,
        )

    async def save(self, record: TrajectoryRecord) -> Path | None:
        """Write the record (when trajectories are on); a full disk must not cost the rollout."""
        if self.trajectory_dir is None:
            return None
        try:
            return await asyncio.to_thread(trajectories.write_trajectory, record, self.trajectory_dir)
        except Exception as exc:
            log.warning("could not save the trajectory of a %s rollout: %s", record.task, exc)
            return None
