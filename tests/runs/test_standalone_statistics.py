"""A step's figures from its groups' outputs, as verifiers hands them over: masked rollouts are counted
with their cause in one line, and a figure with nothing to average is null, never NaN (not JSON)."""

from __future__ import annotations

import json

from air.runs.standalone import masked_cause, step_statistics

ENGINE = "Docker engine unreachable at unix:///var/run/docker.sock: the container and the work in it were lost"


def _masked(message: str) -> dict:
    # What verifiers 0.1.10's state_to_output writes for a rollout whose state holds an error.
    chain = f"SandboxError({message!r}) -> EnvFault({message!r})"
    return {"reward": 0.0, "error": {"error": "SandboxError", "error_chain_repr": chain, "error_chain_str": "x"}}


def test_a_step_whose_rollouts_were_all_masked_has_no_nan_and_says_why() -> None:
    stats = step_statistics(3, [[_masked(ENGINE)] * 4, [_masked(ENGINE)] * 4], seconds=1.5)
    text = json.dumps(stats, allow_nan=False)  # raises on NaN
    assert stats["masked"] == 8 and stats["masked_causes"] == {ENGINE: 8}
    assert stats["reward_mean"] is None and stats["reward_min"] is None and stats["reward_std"] is None
    assert stats["zero_advantage_groups"] is None, "no group was trained on: its share is unknown, not 0"
    assert "NaN" not in text


def test_masked_groups_do_not_count_as_zero_advantage_groups() -> None:
    kept = [{"reward": 1.0, "metrics": {}}, {"reward": 0.0, "metrics": {}}]
    stats = step_statistics(0, [kept, [_masked(ENGINE)] * 2], seconds=1.0)
    assert stats["zero_advantage_groups"] == 0.0 and stats["masked"] == 2
    assert stats["reward_mean"] == 0.5


def test_the_cause_is_our_one_line_message_whatever_the_shape() -> None:
    assert masked_cause(_masked(ENGINE)["error"]) == ENGINE
    assert masked_cause("SandboxError('shell exited\\nmore')") == "shell exited\\nmore"
    assert masked_cause("plain text\nsecond line") == "plain text"
    assert masked_cause({}) == "unknown error"
