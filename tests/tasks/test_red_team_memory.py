"""Red team, round 5 (issue 50, item 3), through the env's rollout path: memory the agent fills with what no kill
frees never masks its rollout.

- Empty files in /tmp and /dev/shm use no tmpfs bytes but about 1 KiB of kernel memory each (1.5 KiB with long
  names), charged to the container; neither mount bounded the number of files. Filled until memory was full, the
  new shell and root's exec were OOM-killed and the rollout was masked. Now each mount has an inode bound
  (storage.tmpfs_inodes): the files stop at "No space left on device" and play goes on.
- A configuration whose /tmp reaches the memory limit (now refused at load, tests/sandbox/test_memory_budget.py)
  let plain bytes in /tmp do the same. Built here past the refusal (``model_construct``): the rollout ends with
  the no-score reward (the agent's forfeit, ``shell_lost``), never masked.
"""

from __future__ import annotations

import asyncio

import docker
import pytest

from air.policies.scripted import ScriptPolicy
from air.sandbox.config import LABEL_RUN
from air.sandbox.removal import wait_for_removals
from rigs.patience import backstop
from tests import rollouts
from tests.mlgym_image import prepared_standin_image
from tests.red_team import make_env, past_the_memory_budget, run_attack

pytestmark = pytest.mark.docker

NEW_SHELL = "a new shell was started"
SUBMIT = "cp sample_submission.csv submission.csv && validate"


def fill_with_files(folder: str, most: int = 1_500_000) -> str:
    """Empty files in ``folder`` until one cannot be made (or ``most``): the count and why it stopped."""
    return (
        'python3 -c "import os\n'
        "made, why = 0, 'none'\n"
        f"for i in range({most}):\n"
        "    try:\n"
        f"        os.close(os.open('{folder}/f%d' % i, os.O_CREAT | os.O_WRONLY, 0o600))\n"
        "    except OSError as exc:\n"
        "        why = exc.strerror\n"
        "        break\n"
        "    made += 1\n"
        "print('made', made, 'stopped:', why)\""
    )


def fill_in_the_shell(folder: str) -> str:
    """The same by bash builtins (no process to start, none to kill but the shell): the last KiB of memory."""
    return f"i=0; while : > {folder}/b$i; do i=$((i+1)); done; echo made $i"


@pytest.mark.timeout(600)
async def test_empty_files_in_memory_never_mask_the_rollout(tmp_path, docker_image):
    """Empty files in /tmp, then /dev/shm, as many as can be made (by Python, then by the shell itself: it masked
    the rollout 5 of 5 times), then the shell killed: a new one starts, and the evaluation goes through."""
    commands = [
        fill_with_files("/tmp"),
        fill_in_the_shell("/tmp"),
        fill_with_files("/dev/shm"),
        fill_in_the_shell("/dev/shm"),
        "kill -9 $$",  # the shell's replacement must start with the files still there
        "df -i /tmp /dev/shm",
        SUBMIT,
    ]
    output, record = await run_attack(tmp_path, docker_image, commands, task="loanDefault")
    assert output.get("error") is None, f"the rollout was masked: {output.get('error')}"
    assert record.exit_status not in ("error", "shell_lost"), record.exit_status
    for index in (0, 1, 2, 3):
        assert "No space left on device" in record.turns[index].output, record.turns[index].output[-500:]
    assert "made 0" in record.turns[1].output and "made 0" in record.turns[3].output  # stopped at the bound
    assert NEW_SHELL in record.turns[4].output, record.turns[4].output[-500:]
    evaluation = record.turns[6].evaluation
    assert evaluation is not None and evaluation.status == "ok", evaluation


@pytest.fixture(params=["ours", "mlgym-layout"])
def image(request: pytest.FixtureRequest, docker_image: str) -> str:
    """Our image, and MLGym's layout (prepared: the form in which evaluation accepts it)."""
    if request.param == "ours":
        return docker_image
    return prepared_standin_image(docker_image)


@pytest.mark.timeout(600)
async def test_memory_full_of_what_no_kill_frees_is_the_agents_forfeit(tmp_path, image, monkeypatch):
    """/tmp as large as the memory limit (refused at load, built here past the check): bytes in it, then empty
    files made by the shell's builtins, fill the container's memory until no new shell (nor root's exec) can
    start. The container runs and the engine answers: the rollout ends with the no-score reward, never masked,
    and its container is removed (issue 62, cause 6: under a minute from the shell's loss, docs/security.md)."""
    past_the_memory_budget(monkeypatch, memory="1g", tmp_size="1g", shm_size="64m")
    # Each step eats what the last one's killed processes gave back; the rollout ends at the first that leaves
    # no room for a new shell (the steps after it are not played).
    fills = [f"i=0; while : > /tmp/b{n}_$i; do i=$((i+1)); done; echo made $i" for n in range(8)]
    commands = [SUBMIT, "head -c 1100M /dev/zero > /tmp/fill; echo $?", *fills, "kill -9 $$"]
    env = make_env(tmp_path, image, task_configs=["loanDefault"], max_turns=len(commands))
    (output,) = await rollouts.run_group(env, ScriptPolicy(commands), "loanDefault")
    (record,) = rollouts.trajectories(tmp_path)
    assert output.get("error") is None, f"the rollout was masked: {output.get('error')}"
    assert record.exit_status == "shell_lost", (record.exit_status, [t.output[-200:] for t in record.turns])
    assert record.turns[0].evaluation is not None and record.turns[0].evaluation.status == "ok", record.turns[0]
    assert output["reward"] < -1.0, output["reward"]  # the no-score reward, whatever was scored before
    assert "the container's memory is full" in record.turns[-1].output, record.turns[-1].output
    # And the container goes with its rollout (removed in the background: waited for here).
    assert await asyncio.to_thread(wait_for_removals, backstop(60))
    running = docker.from_env().containers.list(filters={"label": f"{LABEL_RUN}={env.settings.run_id}"}, sparse=True)
    assert not running, running
