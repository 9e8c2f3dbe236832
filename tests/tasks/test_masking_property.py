"""Masking only on proof (issue 62, cause 2), as a property: over generated sequences of what an agent may do to its
own sandbox (kill or replace its shell, move, lock or replace its folders, hold pids, write to every descriptor it
can open, stop every process of its uid, close its shell's output), no rollout is masked. A rollout may end as the
agent's forfeit (scored, the no-score reward); it is never dropped from training as the host's failure.

The sequences come from a seeded generator (the seed is in the test's id): each run plays the same ones.
"""

from __future__ import annotations

import random

import pytest

from tests.mlgym_image import prepared_standin_image
from tests.red_team import run_attack

pytestmark = [pytest.mark.docker, pytest.mark.timeout(900)]

BEHAVIOURS = [
    "kill -9 $$",
    "exec sleep 1000",
    "exec 1>&- 2>&-; sleep 1",
    "cd ~; mv workspace ws_$RANDOM$RANDOM; kill -9 $$",
    "chmod 000 ~/workspace; kill -9 $$",
    "cd /; chmod 000 ~; kill -9 $$",
    "cd ~; rm -rf workspace; ln -s /tmp workspace; kill -9 $$",
    "cd ~; rm -rf workspace; touch workspace",
    "(for i in $(seq 1500); do sleep 1000 & done) >/dev/null 2>&1; kill -9 $$",
    'for f in /proc/[0-9]*/fd/*; do echo junk 2>/dev/null >"$f"; done; true',
    "(setsid bash -c 'for i in $(seq 300); do kill -STOP -1; sleep 0.05; done' >/dev/null 2>&1 &); sleep 1",
    "trap '' INT TERM; sleep 100",
    "sleep 100",
    "echo ok",
]


def sequence(seed: int, length: int) -> list[str]:
    rng = random.Random(seed)
    return [rng.choice(BEHAVIOURS) for _ in range(length)] + ["echo alive; pwd"]


@pytest.fixture(scope="session")
def mlgym_shaped(docker_image: str) -> str:
    return prepared_standin_image(docker_image)


@pytest.mark.parametrize(("image", "seed"), [("ours", 62), ("ours", 6200), ("mlgym", 620)])
async def test_no_generated_behaviour_masks_a_rollout(tmp_path, request, image, seed):
    played = request.getfixturevalue("docker_image" if image == "ours" else "mlgym_shaped")
    commands = sequence(seed, 12)
    output, record = await run_attack(tmp_path, played, commands, task="loanDefault", command_timeout=5)
    assert output.get("error") is None, f"masked, seed {seed}: {output.get('error')}\n{commands}"
    assert record.exit_status != "error", record.exit_status
    if record.exit_status != "shell_lost":  # a forfeit ends it early, scored; else every turn was answered
        assert "alive" in record.turns[-1].output, record.turns[-1].output
