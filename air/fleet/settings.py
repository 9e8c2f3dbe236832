"""The fleet's timings and bounds, typed and checked when read (options of the fleet's spread and node commands)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, model_validator


class SpreadSettings(BaseModel):
    """The spreader's side. A node is lost when it has not answered a status probe for ``lost_after_s``, or
    says its Docker engine or its env server has not answered for that long: its runs in flight are failed
    at most ``lost_after_s + 2 * probe_interval_s`` after the last answer (docs/scaling.md)."""

    model_config = ConfigDict(extra="forbid")

    # The descriptions are `air fleet spread`'s --help lines (air.cli.options makes its flags of these fields).
    probe_interval_s: float = Field(
        1.0, gt=0, le=60, description="seconds between status probes", json_schema_extra={"flag": "--probe-interval"}
    )
    lost_after_s: float = Field(
        10.0,
        gt=0,
        le=3600,
        description="seconds of silence that lose a node (its runs in flight are failed)",
        json_schema_extra={"flag": "--lost-after"},
    )
    node_capacity: int | None = Field(
        None, ge=1, description="at most this many episodes per node (default: what the node says it runs)"
    )
    log_interval_s: float = Field(
        30.0, gt=0, description="how often a line per node goes to the log", json_schema_extra={"cli": False}
    )

    def silent_too_long(self, silent_s: float, unanswered: int) -> bool:
        """Lost to silence: ``lost_after_s`` without an answer and that many probes unanswered (at least two),
        so a prober that was itself descheduled for a while loses nobody on that account alone."""
        return silent_s > self.lost_after_s and unanswered >= max(2, int(self.lost_after_s / self.probe_interval_s))

    @model_validator(mode="after")
    def _probe_faster_than_loss(self) -> SpreadSettings:
        if self.lost_after_s < 2 * self.probe_interval_s:
            raise ValueError(
                f"lost_after_s ({self.lost_after_s}) must be at least twice probe_interval_s ({self.probe_interval_s}):"
                " one late probe must not lose a node"
            )
        return self


class GateSettings(BaseModel):
    """The env node's side: how often it checks its own Docker engine and env server."""

    model_config = ConfigDict(extra="forbid")

    check_interval_s: float = Field(1.0, gt=0, le=60)
    check_timeout_s: float = Field(3.0, gt=0, le=60)
