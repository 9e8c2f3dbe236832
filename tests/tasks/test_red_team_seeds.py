"""Red team, a game's loophole (issue 20, class 5), through the env's rollout path.

laneMerge's evaluate.py is in the agent's workspace, and the other driver's dice were seeded from its
public constants (``BASE_SEED`` + the match's index). A strategy that rebuilds those dice knows every draw
before the other driver makes it and plans each match around them: 3.14, where no strategy that does not
see the draws can expect more than 2.69. The dice now come from the hidden evaluation seed (one per group,
recorded in the trajectory); the published seeds only serve a run by hand.
"""

from __future__ import annotations

import hashlib
from functools import cache

import pytest

from air.policies.scripted import ScriptPolicy
from tests import rollouts
from tests.red_team import heredoc, lane_score_by_hand, make_env

pytestmark = pytest.mark.docker

# The attacker's strategy: the other driver's habits (what probing it with `validate` teaches), and its
# dice rebuilt from evaluate.py's public seeds; each match is planned over all ten known draws.
REPLAY = '''
import random
from functools import lru_cache

BASE_SEED = 20240611  # evaluate.py's
PAYOFF = {(0, 0): 3, (0, 1): 1, (1, 0): 5, (1, 1): 0}
_match = -1
_plan = []


def their_go_chance(history):
    """The other driver's chance of GO after ``history`` ((my move, their move) per round)."""
    if not history:
        return 0.5
    mine = [m for m, _ in history[-3:]]
    my_last, their_last = history[-1]
    if len(history) >= 3 and mine == [1, 1, 1]:
        return 0.85
    if my_last == 1 and their_last == 1:
        return 0.2
    return 0.75 if my_last == 0 else 0.35


def plan(draws):
    @lru_cache(maxsize=None)
    def best(history):
        if len(history) == len(draws):
            return 0, ()
        theirs = int(draws[len(history)] < their_go_chance(list(history)))
        options = []
        for mine in (0, 1):
            rest, moves = best(history + ((mine, theirs),))
            options.append((PAYOFF[mine, theirs] + rest, (mine,) + moves))
        return max(options)

    return list(best(())[1])


def row_strategy(history):
    global _match, _plan
    if not history:
        _match += 1
        dice = random.Random((BASE_SEED + _match) * 7919 + 17)
        _plan = plan([dice.random() for _ in range(10)])
    return _plan[len(history)]
'''


@cache
def best_blind_score() -> float:
    """The most a strategy that does not see the draws can expect per round against the other driver's
    habits (the attacker's model of them): the best reply to every history, by dynamic programming."""
    model: dict = {}
    exec(REPLAY, model)
    chance, payoff = model["their_go_chance"], model["PAYOFF"]

    @cache
    def value(history: tuple) -> float:
        if len(history) == 10:
            return 0.0
        p = chance(list(history))
        return max(
            sum(q * (payoff[mine, theirs] + value((*history, (mine, theirs)))) for theirs, q in ((1, p), (0, 1 - p)))
            for mine in (0, 1)
        )

    return value(()) / 10


@pytest.mark.timeout(400)
async def test_replaying_the_public_dice_pays_nothing(tmp_path, docker_image):
    blind = best_blind_score()
    assert lane_score_by_hand(None, REPLAY) > blind + 0.3, "the replay must work against the published draws"
    # One group of two identical rollouts under the env's own seeding (no pinned seed).
    env = make_env(tmp_path, docker_image, max_turns=2, evaluation_seed=None)
    policy = ScriptPolicy([heredoc("strategy.py", REPLAY), "validate"])
    outputs = await rollouts.run_group(env, policy, "laneMerge", n=2)
    assert [o.get("error") for o in outputs] == [None, None]
    records = rollouts.trajectories(tmp_path)
    seeds = {r.evaluation_seed for r in records}
    scores = {r.turns[1].evaluation.score for r in records}
    assert len(records) == 2 and len(seeds) == 1 and None not in seeds, seeds  # one group, one recorded seed
    assert len(scores) == 1, f"the same strategy under the group's seed scored {scores}"
    (score,) = scores
    assert score is not None and score < blind, f"the replay scored {score}: it still predicts the draws"


def public_dice_attack(key: str, settings_seed: int = 0) -> str:
    """REPLAY with the dice an agent that knows our code (it is in its container) derives from the public inputs
    of the evaluation seed as they stood before issue 50: the env's seed, the task, the group key and the count of
    evaluations (sha256, no secret). It attacks the first evaluation of a rollout of group ``key``."""
    group = f"air-group/{settings_seed}/laneMerge/{key}"
    return REPLAY.replace(
        "        dice = random.Random((BASE_SEED + _match) * 7919 + 17)\n",
        "        import hashlib\n"
        f"        group = int.from_bytes(hashlib.sha256({group!r}.encode()).digest()[:8], 'big')\n"
        "        seed = int.from_bytes(hashlib.sha256(f'air-evaluation/{group}/0'.encode()).digest()[:8], 'big')\n"
        "        dice = random.Random(seed * 2000 + _match)  # evaluate.py: seed * NUM_MATCHES + match\n",
    )


def public_evaluation_seed(key: str, settings_seed: int = 0) -> int:
    """What the attack above takes for the first evaluation's seed."""
    digest = hashlib.sha256(f"air-group/{settings_seed}/laneMerge/{key}".encode()).digest()
    group = int.from_bytes(digest[:8], "big")
    return int.from_bytes(hashlib.sha256(f"air-evaluation/{group}/0".encode()).digest()[:8], "big")


@pytest.mark.timeout(400)
async def test_an_agent_that_knows_the_code_cannot_compute_the_dice(tmp_path, docker_image):
    """Issue 50: every input of the evaluation seed was public. The attack predicts the dice of the first
    evaluation from the env's public seed and the group key; under the host's secret it plays blind."""
    blind = best_blind_score()
    env = make_env(tmp_path, docker_image, max_turns=2, evaluation_seed=None)
    (row,) = [r for r in env.get_dataset().to_list() if r["task"] == "laneMerge"]
    key = f"example/{row['example_id']}"  # what classic run_group groups by (env.seeds.group_key)
    attack = public_dice_attack(key)
    # The attack works where its guess is right: against the public derivation's seed, run by hand.
    assert lane_score_by_hand(public_evaluation_seed(key), attack) > blind + 0.3
    outputs = await rollouts.run_group(env, ScriptPolicy([heredoc("strategy.py", attack), "validate"]), "laneMerge")
    assert [o.get("error") for o in outputs] == [None]
    (record,) = rollouts.trajectories(tmp_path)
    score = record.turns[1].evaluation.score
    assert score is not None and score < blind, f"the attack scored {score} (blind best {blind:.3f}): it knew the dice"
