"""Red team, masking (issue 39, item 2), through the env's rollout path: nothing the agent does to its workspace,
home or memory turns its rollout into a masked one (dropped from training instead of penalised: a policy would
learn to throw its bad rollouts away). Each route is played 50 times in one rollout, none may mask it.

- The workspace renamed or made unenterable, then the shell killed: the replacement shell was started in the fixed
  workspace, failed twice, and the rollout was masked ("a new shell did not start").
- System V shared memory that no process maps filled the memory cgroup (the OOM killer cannot free it), then the
  shell killed: no shell could start; masked.
"""

from __future__ import annotations

import pytest

from air.sandbox.container import reset_docker_client
from air.sandbox.errors import ShellEnded
from air.sandbox.shell import Shell
from tests.red_team import heredoc, past_the_memory_budget, run_attack

pytestmark = pytest.mark.docker

ROUNDS = 50
NEW_SHELL = "a new shell was started"
# `;`, not `&&`: a rename the storage driver refuses for a folder of the image (overlay2: EXDEV, mv then copies and
# cannot remove the task's root-owned files) still ends with the shell killed.
WORKSPACE_ROUTES = [
    "cd ~; mv workspace ws_moved_$RANDOM$RANDOM; kill -9 $$",
    "chmod 000 ~/workspace; kill -9 $$",
    "cd /; chmod 000 ~; kill -9 $$",
    "cd ~; mv workspace ws_gone_$RANDOM$RANDOM; touch workspace; kill -9 $$",
]

# Segments of 16 MiB made, written and left unmapped until none more can be made; then the shell is killed.
FILL_SHM = """
import ctypes
libc = ctypes.CDLL(None, use_errno=True)
libc.shmat.restype = ctypes.c_void_p
made = 0
for _ in range(256):
    ident = libc.shmget(0, 16 << 20, 0o1000 | 0o600)
    if ident < 0:
        break
    address = libc.shmat(ident, None, 0)
    if address in (None, ctypes.c_void_p(-1).value):
        break
    ctypes.memset(address, 1, 16 << 20)
    libc.shmdt(ctypes.c_void_p(address))
    made += 1
print("segments", made)
"""


def assert_never_masked(output, record, rounds: int) -> None:
    assert output.get("error") is None, f"the rollout was masked: {output.get('error')}"
    assert record.exit_status not in ("error", "shell_lost"), record.exit_status
    restarted = sum(NEW_SHELL in turn.output for turn in record.turns)
    others = [turn.output[-300:] for turn in record.turns[:rounds] if NEW_SHELL not in turn.output]
    assert restarted == rounds, f"{restarted} of {rounds} rounds got a new shell; the others said: {others}"


@pytest.fixture(params=["overlay2", "btrfs"])
def engine(request, monkeypatch):
    """The default engine (overlay2 refuses to rename a folder of the image: EXDEV), and one on btrfs, where the
    workspace is renamed away for real."""
    if request.param == "btrfs":
        quota_engine = request.getfixturevalue("quota_engine")
        monkeypatch.setenv("DOCKER_HOST", quota_engine.address)
        reset_docker_client()
    yield request.param
    reset_docker_client()


@pytest.mark.timeout(600)
async def test_a_workspace_moved_or_locked_away_never_masks_the_rollout(tmp_path, docker_image, engine):
    commands = [WORKSPACE_ROUTES[i % len(WORKSPACE_ROUTES)] for i in range(ROUNDS)]
    commands.append("cd ~/workspace && touch mine && pwd")  # the workspace is there again, and the agent's
    output, record = await run_attack(tmp_path, docker_image, commands, task="loanDefault")
    assert_never_masked(output, record, ROUNDS)
    assert record.turns[-1].output.startswith("/home/agent/workspace\n"), record.turns[-1].output
    if engine == "btrfs":
        assert "cannot remove" not in record.turns[0].output, "the workspace was not renamed away"


@pytest.mark.timeout(600)
async def test_unmapped_shared_memory_never_masks_the_rollout(tmp_path, docker_image):
    plant = heredoc("~/fill_shm.py", FILL_SHM)
    commands = [f"{plant}\npython3 ~/fill_shm.py; kill -9 $$"] * ROUNDS
    output, record = await run_attack(tmp_path, docker_image, commands, task="loanDefault")
    assert_never_masked(output, record, ROUNDS)
    filled = [turn.output for turn in record.turns if "segments " in turn.output]
    assert len(filled) == ROUNDS and "segments 0" not in "".join(filled), filled[:2]


@pytest.mark.timeout(300)
async def test_a_shell_that_cannot_start_in_a_live_container_is_the_agents_failure(tmp_path, docker_image, monkeypatch):
    """What keeps a shell from starting, once every process of the agent is killed, can only be the agent's (its
    files in memory, say): with the container running and answering root, the rollout ends with the no-score
    reward, never masked. (The shell's start is made to fail here: no route the agent has left does it.)"""
    real_start = Shell.start
    started = []

    async def start_then_refuse(self, cwd=None):
        started.append(cwd)
        if len(started) > 1:  # the first shell starts; every replacement fails
            raise ShellEnded("shell did not start properly: ''")
        await real_start(self, cwd=cwd)

    monkeypatch.setattr(Shell, "start", start_then_refuse)
    commands = ["cp sample_submission.csv submission.csv && validate", "kill -9 $$"]
    output, record = await run_attack(tmp_path, docker_image, commands, task="loanDefault")
    assert output.get("error") is None, f"the rollout was masked: {output.get('error')}"
    assert record.exit_status == "shell_lost", record.exit_status
    assert record.turns[0].evaluation is not None and record.turns[0].evaluation.status == "ok", record.turns[0]
    assert output["reward"] < -1.0, output["reward"]  # the no-score reward, whatever was scored before
    assert record.final_evaluation is None or record.final_evaluation.kind != "final", record.final_evaluation
    assert "no new shell could start" in record.turns[-1].output, record.turns[-1].output


@pytest.mark.timeout(300)
async def test_an_evaluation_the_oom_killer_ends_says_so(tmp_path, docker_image, monkeypatch):
    """Files in /tmp (a tmpfs, counted against the container's memory) leave the evaluation no memory: it fails,
    saying why (it read "ran past its budget (300 s)" after a second), and goes through once they are gone. (A /tmp
    as large as memory, which the memory budget now refuses at load: within it, full tmpfs mounts leave room.)"""
    past_the_memory_budget(monkeypatch, memory="1g", tmp_size="1g")
    commands = [
        "cp sample_submission.csv submission.csv && head -c 970M /dev/zero > /tmp/fill; validate",
        "rm /tmp/fill; validate",
    ]
    output, record = await run_attack(tmp_path, docker_image, commands, task="loanDefault")
    assert output.get("error") is None, output.get("error")
    starved, fed = record.turns[0].evaluation, record.turns[1].evaluation
    assert starved is not None and starved.status == "evaluation_failed", starved
    assert "ran out of memory" in starved.error and "OOM killer" in starved.error, starved.error
    assert fed is not None and fed.status == "ok", fed
