"""Against a real MLGym checkout (AIR_TEST_MLGYM_ROOT; skipped otherwise): MLGym's games, whose
evaluators draw their matches from the global ``random`` unseeded, score identical rollouts of a group
identically and other groups differently, and ``air replay`` reproduces a recorded rollout exactly."""

from __future__ import annotations

import json

import pytest
from openai import AsyncOpenAI

from air.policies.scripted import ScriptPolicy
from air.runs.replay import replay_trajectory
from air.serving.server import PolicyServer
from tests.opt_in import mlgym_checkout
from tests.rollouts import make_env, trajectories

CHECKOUT = mlgym_checkout()
pytestmark = [
    pytest.mark.skipif(CHECKOUT is None, reason="no MLGym checkout (set AIR_TEST_MLGYM_ROOT)"),
    pytest.mark.docker,
    pytest.mark.timeout(600),
]


async def _group(env, group_id: str, n: int = 2) -> None:
    row = env.get_dataset().to_list()[0]
    row = {**row, "info": {**row["info"], "group_id": group_id}}
    # The starter strategy, which draws from `random` itself, against the task's random opponent.
    with PolicyServer(ScriptPolicy(["validate", "submit"])) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        try:
            outputs = await env.run_group([row] * n, client, server.model_name, {"temperature": 1.0})
        finally:
            await client.close()
    assert not any(dict(o).get("error") for o in outputs)


@pytest.mark.parametrize("name", ["battleOfSexes", "prisonersDilemma"])
async def test_identical_rollouts_of_a_game_score_identically_and_replay_exactly(tmp_path, docker_image, name):
    env = make_env(tmp_path, docker_image, task_configs=[name], task_root=str(CHECKOUT), max_turns=3)
    await _group(env, "1-0")
    await _group(env, "1-1")
    scores: dict[str, list[list[float | None]]] = {}
    for record in trajectories(tmp_path):
        evaluations = [record.turns[0].evaluation, record.final_evaluation]
        scores.setdefault(record.group_id or "", []).append([e.score if e else None for e in evaluations])
    assert scores["1-0"][0] == scores["1-0"][1] and scores["1-1"][0] == scores["1-1"][1], scores
    assert scores["1-0"][0] != scores["1-1"][0], scores

    recorded = next(
        p for p in (tmp_path / "trajectories").rglob("*.json") if json.loads(p.read_text())["group_id"] == "1-0"
    )
    comparison = await replay_trajectory(recorded, image=docker_image)
    assert comparison["replayed"] == comparison["recorded"] == scores["1-0"][0]
    assert comparison["reproduced"] and comparison["tolerance"] == 1e-4
