"""Each rollout's evaluation seed: one per group, from the env's seed under the host's secret; a fixed one wins."""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
from pathlib import Path

import pytest

from air.env.core import MLGymCore
from air.env.seeds import (
    EvaluationSecretError,
    default_secret_file,
    group_key,
    load_secret,
    rollout_seed,
    secret_fingerprint,
)
from air.env.settings import MLGymEnvSettings
from air.tasks.workspace import evaluation_seed
from rigs.patience import backstop

SECRET = bytes(range(32))


def test_a_group_is_its_runners_id_else_its_example() -> None:
    assert group_key({"group_id": "3-1", "example": 0}, 5) == "group/3-1"
    assert group_key({"example": 0}, 5) == group_key(None, 5) == "example/5"


def test_one_seed_per_group_from_the_envs_seed() -> None:
    settings = MLGymEnvSettings()
    seed = rollout_seed(settings, SECRET, "laneMerge", "group/1-0")
    assert seed == rollout_seed(MLGymEnvSettings(), SECRET, "laneMerge", "group/1-0")  # every rollout of the group
    assert 0 <= seed < 2**64
    others = {
        rollout_seed(settings, SECRET, "laneMerge", "group/1-1"),
        rollout_seed(settings, SECRET, "loanDefault", "group/1-0"),
        rollout_seed(MLGymEnvSettings(seed=1), SECRET, "laneMerge", "group/1-0"),
        rollout_seed(settings, SECRET[::-1], "laneMerge", "group/1-0"),
    }
    assert seed not in others and len(others) == 4


def test_the_public_inputs_alone_do_not_give_the_seed() -> None:
    """An agent knows the code, the env's seed, the task and the group: what it can compute from them (the
    derivation before issue 50, or the HMAC under any guessable key) is not the seed."""
    settings = MLGymEnvSettings()
    seed = rollout_seed(settings, os.urandom(32), "laneMerge", "example/0")
    public = b"air-group/0/laneMerge/example/0"
    guesses = {int.from_bytes(hashlib.sha256(public).digest()[:8], "big")}
    guesses |= {rollout_seed(settings, key, "laneMerge", "example/0") for key in (b"", b"\0" * 32, b"0", b"air")}
    assert seed not in guesses


def test_a_fixed_evaluation_seed_wins() -> None:
    assert rollout_seed(MLGymEnvSettings(evaluation_seed=42), SECRET, "laneMerge", "group/1-0") == 42


def test_each_evaluation_of_a_rollout_has_its_own_seed() -> None:
    seeds = [evaluation_seed(42, i) for i in range(3)]
    assert seeds == [evaluation_seed(42, i) for i in range(3)]
    assert len(set(seeds)) == 3 and 42 not in seeds


def test_seeds_are_too_wide_to_find_from_the_agents_32_bit_one() -> None:
    # The agent's worker gets a 32-bit seed derived from each evaluation's: with 32-bit evaluation seeds, 2^32
    # guesses (an hour of the container's CPU) found the evaluation's seed and then every later one.
    seeds = [evaluation_seed(42, i) for i in range(64)] + [
        rollout_seed(MLGymEnvSettings(), SECRET, "laneMerge", f"group/{i}") for i in range(64)
    ]
    assert all(0 <= s < 2**64 for s in seeds) and max(seeds) >= 2**40


# --- the secret ---------------------------------------------------------------------------------------------


def test_the_default_secret_is_made_once_owner_only_and_kept(air_state_dir: Path) -> None:
    path = default_secret_file()
    assert path == air_state_dir / "evaluation.secret" and not path.exists()
    secret, where = load_secret()
    assert where == path and len(secret) == 32
    assert path.stat().st_mode & 0o777 == 0o600
    assert load_secret() == (secret, path)  # kept: the next run of this user draws alike (--seed reproduces)
    assert secret.hex() not in secret_fingerprint(secret)


def _load_default(queue) -> None:
    queue.put(load_secret()[0])


def test_processes_starting_at_once_agree_on_one_secret(air_state_dir: Path) -> None:
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    workers = [context.Process(target=_load_default, args=(queue,)) for _ in range(6)]
    for worker in workers:
        worker.start()
    found = {queue.get(timeout=backstop(60)) for _ in workers}
    for worker in workers:
        worker.join()
    assert len(found) == 1
    assert [p.name for p in air_state_dir.iterdir()] == ["evaluation.secret"]  # nothing left aside


def test_a_given_secret_file_is_used_and_the_same_file_gives_the_same_seeds(tmp_path: Path) -> None:
    path = tmp_path / "run.secret"
    path.write_text(SECRET.hex() + "\n")
    path.chmod(0o600)
    settings = MLGymEnvSettings(task_configs=["laneMerge"], evaluation_secret_file=str(path))
    one, two = MLGymCore(settings), MLGymCore(settings)
    assert one.group_seed("laneMerge", "group/0-0") == two.group_seed("laneMerge", "group/0-0")
    assert one.group_seed("laneMerge", "group/0-0") == rollout_seed(settings, SECRET, "laneMerge", "group/0-0")
    assert not default_secret_file().exists()  # a given file: nothing made in the state folder


@pytest.mark.parametrize(
    ("text", "mode", "says"),
    [
        (None, 0o600, "cannot read evaluation_secret_file"),
        (SECRET.hex(), 0o644, "readable by others (mode 644): `chmod 600"),
        ("not hex at all", 0o600, "does not hold a secret: expected 64 hex digits"),
        ("abcd", 0o600, "does not hold a secret"),
    ],
)
def test_a_bad_secret_file_is_one_line_naming_it(tmp_path: Path, text: str | None, mode: int, says: str) -> None:
    path = tmp_path / "bad.secret"
    if text is not None:
        path.write_text(text)
        path.chmod(mode)
    with pytest.raises(EvaluationSecretError) as caught:
        MLGymCore(MLGymEnvSettings(task_configs=["laneMerge"], evaluation_secret_file=str(path)))
    message = str(caught.value)
    assert str(path) in message and says in message and "\n" not in message
    if text is not None:
        assert SECRET.hex() not in message


def test_a_fixed_evaluation_seed_needs_no_secret(tmp_path: Path) -> None:
    core = MLGymCore(MLGymEnvSettings(task_configs=["laneMerge"], evaluation_seed=7, evaluation_secret_file="/nope"))
    assert core.group_seed("laneMerge", "group/0-0") == 7
    assert not default_secret_file().exists()


def test_the_secret_never_reaches_the_settings_dump_or_the_log(tmp_path: Path, caplog) -> None:
    settings = MLGymEnvSettings(task_configs=["laneMerge"])
    with caplog.at_level("INFO"):
        MLGymCore(settings)
    secret = default_secret_file().read_text().strip()
    assert secret not in json.dumps(settings.model_dump()) and secret not in caplog.text
    assert secret_fingerprint(bytes.fromhex(secret)) in caplog.text  # which secret a run used, by its name
