"""Each evaluation has a wall-clock budget as a whole (issue 31): a strategy slow on every call, each call
under the per-call limit, used to hold an evaluation for minutes toward the task's training_timeout. Running
out is a failed evaluation (the no-score penalty), the rollout goes on, never masked."""

from __future__ import annotations

import pytest

from air.tasks.config import DEFAULT_EVALUATION_TIMEOUTS
from air.tasks.loader import load_task
from tests.red_team import RESTORE, check_rollout, honest_evaluation, plant, run_attack, wrap


def test_each_task_kind_has_a_budget_that_fits_it():
    game, csv = load_task("laneMerge"), load_task("loanDefault")
    assert game.evaluation_timeout == DEFAULT_EVALUATION_TIMEOUTS["PythonSubmissionTasks"] < game.training_timeout
    assert csv.evaluation_timeout == min(DEFAULT_EVALUATION_TIMEOUTS["CSVSubmissionTasks"], csv.training_timeout)
    own = game.config.model_copy(update={"evaluation_timeout": 7})
    assert type(game)(game.name, game.root, game.config_path, own, game.datasets).evaluation_timeout == 7


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_a_slow_strategy_runs_out_of_the_evaluation_budget(tmp_path, docker_image):
    slow = "import time\ntime.sleep(1.5)"  # every call, well under the per-call limit
    commands = [plant("", wrap(slow)), "validate", RESTORE, "validate"]
    # The honest evaluation after it (about 1 s alone: ~100,000 calls, each a round trip between two processes)
    # must fit the same budget on a loaded host: 6 s did not beside a benchmark, 15 s did not in CI (load ~12,
    # where each round trip waits for the scheduler twice). The slow one (1.5 s a call, 20,000 calls) passes any.
    budget = 60
    output, record = await run_attack(tmp_path, docker_image, commands, evaluation_timeout=budget)
    check_rollout(output, record)  # not masked, nothing forged
    slow_one = record.turns[1].evaluation
    assert slow_one.status == "evaluation_failed" and slow_one.score is None, slow_one
    assert f"budget of {budget} s" in slow_one.error, slow_one.error
    honest_evaluation(record, 3)  # the agent's processes were resumed; the next evaluation is whole
