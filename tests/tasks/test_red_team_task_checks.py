"""Red team, the tasks' own loopholes (issue 20, classes 5 and 7), through the env's rollout path.

The same checks as tests/tasks/test_task_runtime.py's, here as an agent meets them: a reply, a `validate`, a
reward. A CSV submission that repeats ids (MLGym's titanic merges on them: repeating the ids one is sure of
beats the true accuracy), a result of the wrong length (MLGym's blotto: `[120]` won every battlefield
`zip` compared), and a module the agent adds that a model task's evaluator would import (MLGym's RL
evaluators import `gymnax`, which an image may lack).
"""

from __future__ import annotations

import pytest

from tests.mlgym_like import MODEL_IMPORTS_TASK, WRONG_LENGTH_TASK, write_own_task
from tests.red_team import check_rollout, heredoc, run_attack

pytestmark = pytest.mark.docker

# A CSV task whose evaluator trusts the submission's rows, as MLGym's titanic (a merge on the ids) does:
# half of the honest predictions are right; repeating the one id the agent is sure of scores 1.0.
NAIVE_EVALUATE = """\
import argparse, csv, json
ANSWERS = {"1": "0", "2": "1", "3": "1", "4": "0"}
parser = argparse.ArgumentParser()
parser.add_argument("--submission_file")
rows = list(csv.DictReader(open(parser.parse_args().submission_file)))
print(json.dumps({"accuracy": sum(ANSWERS[r["id"]] == r["label"] for r in rows) / len(rows)}))
"""
HONEST = "id,label\n1,0\n2,0\n3,1\n4,1\n"
REPEATED = "id,label\n1,0\n1,0\n1,0\n1,0\n"


@pytest.mark.timeout(300)
async def test_a_submission_repeating_its_ids_scores_nothing(tmp_path, docker_image):
    config = "baseline_scores: [{accuracy: 0.5}]\nsubmission_id_column: id\n"
    root = write_own_task(tmp_path / "MLGym", "naive", "CSVSubmissionTasks", {"evaluate.py": NAIVE_EVALUATE}, config)
    commands = [
        heredoc("submission.csv", HONEST),
        "validate",
        heredoc("submission.csv", REPEATED),
        "validate",
    ]
    output, record = await run_attack(tmp_path, docker_image, commands, task="naive", task_root=str(root))
    check_rollout(output, record, task="naive", baseline=0.5, ceiling=0.5, secrets=[])
    assert record.turns[1].evaluation.score == 0.5, record.turns[1].evaluation
    refused = record.turns[3].evaluation
    assert refused is not None and refused.score is None and refused.status == "evaluation_failed", refused
    assert "gives id 1 more than one row" in refused.error, refused.error


@pytest.mark.timeout(300)
async def test_a_result_of_the_wrong_length_scores_nothing(tmp_path, docker_image):
    root = write_own_task(tmp_path / "MLGym", "fields", *WRONG_LENGTH_TASK)
    commands = ["validate", heredoc("strategy.py", "def allocate():\n    return [120]\n"), "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands, task="fields", task_root=str(root))
    check_rollout(output, record, task="fields", baseline=0.5, ceiling=0.5, secrets=[])
    assert record.turns[0].evaluation.score == 0.5, record.turns[0].evaluation
    refused = record.turns[2].evaluation
    assert refused is not None and refused.score is None, refused
    assert "strategy.allocate returned 1 values; the task expects 6" in refused.error, refused.error


@pytest.mark.timeout(300)
async def test_a_module_the_agent_adds_never_reaches_a_model_evaluator(tmp_path, docker_image):
    root = write_own_task(tmp_path / "MLGym", "modelimports", *MODEL_IMPORTS_TASK)
    commands = [
        "echo a: 1 > config.yaml && mkdir gymnax_like && echo 'EXTRA = 40.0' > gymnax_like/__init__.py && validate"
    ]
    output, record = await run_attack(tmp_path, docker_image, commands, task="modelimports", task_root=str(root))
    check_rollout(output, record, task="modelimports", baseline=2.0, ceiling=2.0, secrets=[])
    evaluation = record.turns[0].evaluation
    assert evaluation is not None and evaluation.status == "ok" and evaluation.score == 2.0, evaluation
