"""Each rollout's evaluation seed: one per group, from the env's seed; a fixed one overrides it."""

from __future__ import annotations

from air.env.seeds import group_key, rollout_seed
from air.env.settings import MLGymEnvSettings
from air.tasks.workspace import evaluation_seed


def test_a_group_is_its_runners_id_else_its_example() -> None:
    assert group_key({"group_id": "3-1", "example": 0}, 5) == "group/3-1"
    assert group_key({"example": 0}, 5) == group_key(None, 5) == "example/5"


def test_one_seed_per_group_from_the_envs_seed() -> None:
    settings = MLGymEnvSettings()
    seed = rollout_seed(settings, "laneMerge", "group/1-0")
    assert seed == rollout_seed(MLGymEnvSettings(), "laneMerge", "group/1-0")  # the same for every rollout
    assert 0 <= seed < 2**64
    others = {
        rollout_seed(settings, "laneMerge", "group/1-1"),
        rollout_seed(settings, "loanDefault", "group/1-0"),
        rollout_seed(MLGymEnvSettings(seed=1), "laneMerge", "group/1-0"),
    }
    assert seed not in others and len(others) == 3


def test_a_fixed_evaluation_seed_wins() -> None:
    assert rollout_seed(MLGymEnvSettings(evaluation_seed=42), "laneMerge", "group/1-0") == 42


def test_each_evaluation_of_a_rollout_has_its_own_seed() -> None:
    seeds = [evaluation_seed(42, i) for i in range(3)]
    assert seeds == [evaluation_seed(42, i) for i in range(3)]
    assert len(set(seeds)) == 3 and 42 not in seeds


def test_seeds_are_too_wide_to_find_from_the_agents_32_bit_one() -> None:
    # The agent's worker gets a 32-bit seed derived from each evaluation's: with 32-bit evaluation seeds, 2^32
    # guesses (an hour of the container's CPU) found the evaluation's seed and then every later one.
    seeds = [evaluation_seed(42, i) for i in range(64)] + [
        rollout_seed(MLGymEnvSettings(), "laneMerge", f"group/{i}") for i in range(64)
    ]
    assert all(0 <= s < 2**64 for s in seeds) and max(seeds) >= 2**40
