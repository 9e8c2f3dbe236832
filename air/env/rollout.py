"""One rollout's own state while the env runs it (sandbox, workspace, rewards, turns), and how it ended."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from air.env.actions import message_text
from air.env.rewards import RewardTracker
from air.env.trajectories import Turn, TurnEvaluation
from air.sandbox.container import Sandbox
from air.tasks.loader import Task
from air.tasks.workspace import TaskWorkspace


class EndReason(StrEnum):
    """How a rollout ended: its trajectory's ``exit_status`` (the strings runs and the viewer read)."""

    SUBMITTED = "submitted"  # the agent submitted
    MAX_TURNS = "max_turns"  # its last turn was played (MLGymCore.turns_over)
    FORMAT_ERRORS = "format_errors"  # max_consecutive_format_errors malformed replies in a row
    TIME_LIMIT = "time_limit"  # rollout_time_limit was up
    SHELL_LOST = "shell_lost"  # the agent broke its own sandbox: no shell starts (forfeit)
    HARNESS_STOPPED = "harness_stopped"  # the v1 harness ended the episode (a token limit, a stop hook)
    PROMPT_TOO_LONG = "prompt_too_long"  # the conversation outgrew the model's context (classic front)
    SUSPICIOUS_EVALUATION = "suspicious_evaluation"  # any of the above, with a score outside the metric's range
    ERROR = "error"  # a fault outside the agent's reach: masked, no reward
    CANCELLED = "cancelled"  # cut short by its run or the orchestrator: no reward
    UNKNOWN = "unknown"


# The classic front's verifiers stop conditions that name how a rollout ended; others (has_error,
# has_final_env_response) come with an error or an end reason already set.
STOP_CONDITIONS = {"max_turns_reached": EndReason.MAX_TURNS, "prompt_too_long": EndReason.PROMPT_TOO_LONG}


@dataclass
class Rollout:
    """What the env keeps about one rollout while it runs."""

    task: Task
    sandbox: Sandbox | None
    workspace: TaskWorkspace | None
    tracker: RewardTracker
    started_at: datetime = field(default_factory=lambda: datetime.now(UTC))
    turns: list[Turn] = field(default_factory=list)
    handled: int = 0  # model replies acted upon
    format_errors: int = 0
    consecutive_format_errors: int = 0
    timeouts: int = 0
    validates: int = 0
    dirty: bool = True  # the workspace may have changed since its last evaluation
    submitted: bool = False
    exit_status: EndReason | None = None  # set where the end is decided; final once closed (end_reason)
    final_evaluation: TurnEvaluation | None = None
    finished: bool = False
    evaluation_seed: int | None = None  # its group's (env.seeds): the evaluators draw from it
    clock_start: float = field(default_factory=time.monotonic)

    def forfeit(self, text: str, command: str | None, why: str) -> str:
        """End the rollout as the agent's failure: it broke its own sandbox (``why``). The no-score reward, no final
        evaluation, the turn that did it recorded with a note; returns the note (the last observation)."""
        self.exit_status = EndReason.SHELL_LOST
        self.tracker.forfeit()
        self.dirty = False
        note = f"[{why}. The episode ends with the no-score reward]"
        if self.turns and self.turns[-1].index == self.handled:
            self.turns[-1].output = f"{self.turns[-1].output}\n{note}"
        else:
            self.turns.append(Turn(index=self.handled, model_text=text, command=command, output=note))
        return note

    def seconds_left(self, limit: float | None) -> float | None:
        """Seconds left of the rollout's wall-clock ``limit`` (None: no limit)."""
        return None if limit is None else limit - (time.monotonic() - self.clock_start)


# The error of a rollout cut short when its driver gave no cause. It ended mid-play: its reward would be
# that of an unfinished workspace, so it has none, and no mean or count takes it in.
CANCELLED = "cancelled before it ended (its run stopped, or the orchestrator dropped it): no reward"


def end_reason(rollout: Rollout, *, cancelled: bool, error: object | None, stop: str = "") -> EndReason:
    """How a closing rollout ended: cut short, failed, what play decided, else the front's stop condition."""
    if cancelled:
        reason = EndReason.CANCELLED
    elif error is not None:
        reason = EndReason.ERROR
    else:
        reason = rollout.exit_status or STOP_CONDITIONS.get(stop, EndReason.UNKNOWN)
    if rollout.tracker.suspicious_evaluations and reason != EndReason.ERROR:
        reason = EndReason.SUSPICIOUS_EVALUATION  # stands out in the viewer and W&B
    return reason


def content_of_completion(completion: Any) -> str:
    if isinstance(completion, list) and completion:
        return message_text(completion[-1])
    return str(completion or "")


def jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, str | int | float | bool) or value is None:
        return value
    return repr(value)
