"""The evaluation seed: an evaluator that draws from the global ``random`` unseeded (MLGym's games do), on
its side and in the agent's strategy, scores the same submission the same under the same seed, and
differently under another; the agent's code cannot find the seed its opponent draws from. laneMerge draws
its opponent's dice from the seed itself (issue 20, class 5)."""

from __future__ import annotations

import pytest

from air.sandbox.container import Sandbox
from air.tasks.loader import load_task
from air.tasks.workspace import TaskWorkspace, evaluation_seed
from tests.red_team import honest_score
from tests.sampling_task import SNOOPING_STRATEGY, TASK, write_sampling_root

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]


async def _score(sandbox: Sandbox, task, seed: int | None) -> float:
    workspace = TaskWorkspace(task, sandbox, seed=seed)
    await workspace.setup()
    evaluation = await workspace.evaluate()
    assert evaluation.ok, evaluation.error
    assert evaluation.score is not None
    return evaluation.score


async def test_the_same_seed_scores_the_same_submission_the_same(tmp_path, sandbox: Sandbox) -> None:
    task = load_task(TASK, str(write_sampling_root(tmp_path / "root")))
    unseeded = {await _score(sandbox, task, None) for _ in range(2)}
    assert len(unseeded) == 2  # the evaluator samples: without a seed, scores differ
    first, again, other = [await _score(sandbox, task, seed) for seed in (7, 7, 8)]
    assert first == again
    assert first != other


async def test_each_evaluation_of_a_rollout_draws_afresh(tmp_path, sandbox: Sandbox) -> None:
    task = load_task(TASK, str(write_sampling_root(tmp_path / "root")))
    workspace = TaskWorkspace(task, sandbox, seed=7)
    await workspace.setup()
    scores = [(await workspace.evaluate()).score for _ in range(2)]
    assert scores[0] == await _score(sandbox, task, 7)  # a fresh workspace starts again at the first seed
    assert scores[0] != scores[1]


async def test_the_agents_code_cannot_find_the_evaluators_seed(tmp_path, sandbox: Sandbox) -> None:
    task = load_task(TASK, str(write_sampling_root(tmp_path / "root")))
    workspace = TaskWorkspace(task, sandbox, seed=7)
    await workspace.setup()
    await sandbox.write_file("/home/agent/workspace/strategy.py", SNOOPING_STRATEGY, owner="agent")
    evaluation = await workspace.evaluate()
    assert evaluation.ok, evaluation.error
    code, seen = await sandbox.exec_root(["cat", "/home/agent/workspace/seen.txt"])
    assert code == 0 and len(seen.splitlines()) > 3  # it did look around
    assert "AIR_EVAL_SEED=" in seen  # its own, derived one way from the evaluator's: /proc was readable
    assert str(evaluation_seed(7, 0)) not in seen
    assert "AIR_EVAL_SEED" not in seen.split("\n", 1)[0]  # not in its os.environ either


async def test_lane_merge_draws_its_opponent_from_the_evaluation_seed(sandbox: Sandbox) -> None:
    task = load_task("laneMerge")
    first, again, other = [await _score(sandbox, task, seed) for seed in (7, 7, 8)]
    assert first == again and first != other
    assert first == honest_score(evaluation_seed(7, 0))  # what evaluate.py scores by hand given that seed
    assert await _score(sandbox, task, None) == task.baseline_score  # no seed: the published matches
