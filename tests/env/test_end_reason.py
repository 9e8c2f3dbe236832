"""How a rollout ended, decided once for both fronts: its typed reason, the strings trajectories record."""

from __future__ import annotations

import pytest

from air.env.core import MLGymCore
from air.env.ending import RolloutLabels
from air.env.rollout import EndReason, end_reason
from air.env.settings import parse_env_settings


@pytest.fixture
def core() -> MLGymCore:
    return MLGymCore(parse_env_settings({"task_configs": ["laneMerge"], "max_turns": 3, "save_trajectories": False}))


def test_the_recorded_strings_stay() -> None:
    assert [r.value for r in EndReason] == [
        "submitted",
        "max_turns",
        "format_errors",
        "time_limit",
        "shell_lost",
        "harness_stopped",
        "prompt_too_long",
        "suspicious_evaluation",
        "error",
        "cancelled",
        "unknown",
    ]


def test_cancelled_then_error_then_play_then_the_stop_condition(core: MLGymCore) -> None:
    rollout = core.new_rollout("laneMerge")
    assert end_reason(rollout, cancelled=False, error=None, stop="max_turns_reached") == EndReason.MAX_TURNS
    assert end_reason(rollout, cancelled=False, error=None, stop="prompt_too_long") == EndReason.PROMPT_TOO_LONG
    assert end_reason(rollout, cancelled=False, error=None) == EndReason.UNKNOWN
    rollout.exit_status = EndReason.SUBMITTED
    assert end_reason(rollout, cancelled=False, error=None, stop="max_turns_reached") == EndReason.SUBMITTED
    assert end_reason(rollout, cancelled=False, error="boom") == EndReason.ERROR
    assert end_reason(rollout, cancelled=True, error="boom") == EndReason.CANCELLED


def test_the_turn_limit_is_the_cores(core: MLGymCore) -> None:
    assert [core.turns_over(n) for n in range(5)] == [False, False, False, True, True]


async def test_the_ending_closes_records_and_says_why(core: MLGymCore) -> None:
    rollout = core.new_rollout("laneMerge")
    ended = await core.end(rollout, RolloutLabels(step=1), cancelled=False, error=ValueError("no container"))
    assert rollout.finished and ended.reason == EndReason.ERROR and ended.path is None
    assert (ended.record.exit_status, ended.record.error, ended.record.reward) == ("error", "no container", None)
