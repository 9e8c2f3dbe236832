"""Time limits through the env's rollout path: a command's timeout comes from the programs it runs (not
from words in it), and a rollout has a wall clock (``rollout_time_limit``) that ends it unmasked."""

from __future__ import annotations

import pytest

from air.policies.scripted import ScriptPolicy
from tests import rollouts

pytestmark = pytest.mark.docker


@pytest.mark.timeout(180)
async def test_a_comment_does_not_buy_the_training_timeout(tmp_path, docker_image):
    env = rollouts.make_env(tmp_path, docker_image, max_turns=2, command_timeout=2, long_command_timeout=60)
    commands = ["sleep 8  # python train.py", "python3 -c 'import time; time.sleep(4); print(\"trained\")'"]
    (output,) = await rollouts.run_group(env, ScriptPolicy(commands), "laneMerge")
    assert output.get("error") is None
    (record,) = rollouts.trajectories(tmp_path)
    assert record.turns[0].timed_out, "a word in a comment gave the command the training timeout"
    assert not record.turns[1].timed_out and "trained" in record.turns[1].output


@pytest.mark.timeout(180)
async def test_the_rollout_time_limit_cuts_a_command_and_ends_the_episode(tmp_path, docker_image):
    env = rollouts.make_env(tmp_path, docker_image, max_turns=4, command_timeout=60, rollout_time_limit=6)
    commands = ["sleep 30", "echo never", "validate", "submit"]
    (output,) = await rollouts.run_group(env, ScriptPolicy(commands), "laneMerge")
    assert output.get("error") is None, "a rollout out of time is the agent's outcome, not a masked one"
    (record,) = rollouts.trajectories(tmp_path)
    assert record.exit_status == "time_limit"
    assert record.turns[0].timed_out and record.turns[0].duration_s < 30
    assert len(record.turns) == 2 and "time limit (6 s) is up" in record.turns[1].output
    assert "never" not in record.turns[1].output
    assert record.final_evaluation is not None and record.final_evaluation.status == "ok"
