"""No way out of an evaluation pays better than a bad honest answer (issue 20, class 6), through the env's
rollout path on a CSV task: a rollout without a score earns less than -clip, the least any score earns."""

from __future__ import annotations

import pytest

from air.policies.scripted import ScriptPolicy
from tests import rollouts

pytestmark = pytest.mark.docker

NAN_SUBMISSION = (
    "python -c \"import pandas as p; t = p.read_csv('data/test.csv'); "
    "t.assign(defaulted=float('nan'))[['id', 'defaulted']].to_csv('submission.csv', index=False)\""
)


@pytest.mark.timeout(180)
@pytest.mark.parametrize("breaking", [NAN_SUBMISSION, "rm -f submission.csv", "echo 'id,defaulted' > submission.csv"])
async def test_a_broken_evaluation_earns_less_than_any_honest_score(tmp_path, docker_image, breaking):
    env = rollouts.make_env(tmp_path, docker_image, max_turns=2)
    (output,) = await rollouts.run_group(env, ScriptPolicy([breaking, "validate"]), "loanDefault")
    assert output.get("error") is None
    (record,) = rollouts.trajectories(tmp_path)
    evaluation = record.turns[1].evaluation
    assert evaluation is not None and evaluation.score is None, evaluation
    assert output["reward"] < -env.settings.reward.clip, "failing the evaluation paid as well as a bad answer"
