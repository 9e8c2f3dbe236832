"""Issue 50, item 2, through the rollout path: `fallocate -n` reserves gigabytes past a file's end in one call (its
size stays put: max_file_size never applies). The watch saw it at the next check and stopped the agent, but the
blocks stayed on the host's disk until the agent deleted the files or the rollout ended (6 GiB under a 200m
limit). Now the stop frees them: measured from the host (the container's upper folder, as
benchmarks/disk_fallocate.py does), the files still there with their sizes, the evaluation after whole."""

from __future__ import annotations

import os
import random
import re
from dataclasses import dataclass, field
from typing import Any

import docker
import pytest

from air.policies.scripted import ScriptPolicy
from air.sandbox.config import LABEL_RUN
from air.sandbox.storage import can_size, storage_driver
from tests import rollouts
from tests.host_disk import container_bytes
from tests.red_team import check_rollout, honest_evaluation, make_env

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def watched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch, as where this process cannot give a container a file system of its own (``disk_layer`` "auto"
    does on a root host with loop devices: the kernel's limit, tests/sandbox/test_disk_image.py)."""
    from air.sandbox import disk_image

    monkeypatch.setattr(disk_image, "wanted", lambda config, driver, client: None)


LIMIT = 200 << 20
# 3 x 1 GiB reserved on empty files, 1 GiB past the end of a 100M one, 1 GiB on a file deleted but held open by
# the agent's shell itself (fd 3: the stop kills every process of the agent but its shell).
RESERVE = (
    "cd ~ && for i in 1 2 3; do touch f$i && fallocate -n -l 1G f$i || break; done; truncate -s 100M s && "
    "fallocate -n -o 100M -l 1G s; exec 3> ~/held; fallocate -n -l 1G ~/held; rm ~/held; sleep 8; echo never"
)
SIZES = "stat -c '%n %s' ~/f1 ~/f2 ~/f3 ~/s; ls -l /proc/$$/fd/3"


def upper_bytes(run_id: str) -> int:
    """Blocks the run's one container takes on the host's disk, files held open after deletion included."""
    (container,) = docker.from_env().containers.list(filters={"label": f"{LABEL_RUN}={run_id}"})
    return container_bytes(container)


@dataclass
class MeasuringScript(ScriptPolicy):
    """The commands in order; before sending command ``at``, the host's bytes of the run's container are taken."""

    run_id: str = ""
    at: int = 0
    measured: list[int] = field(default_factory=list)

    def respond(self, messages: list[dict[str, Any]], rng: random.Random) -> str:
        if sum(1 for m in messages if m.get("role") == "assistant") == self.at:
            self.measured.append(upper_bytes(self.run_id))
        return super().respond(messages, rng)


async def reserve_then_look(tmp_path, docker_image, attack: str, look: str, over: bool = False):
    """A rollout of ``attack``, ``look`` and a validate; the host's bytes of the container taken after ``look``
    (it waited for the shell, so for the stop, kill then free, to end). Returns the record. ``over``: the files'
    sizes alone pass the limit, so the validate fails with it."""
    if can_size(storage_driver(docker.from_env())):
        pytest.skip("this engine sizes containers itself: tests/sandbox/test_disk_quota.py covers its quota")
    commands = [attack, look, "validate"]
    run_id = f"pytest-fallocate-{os.getpid()}"
    env = make_env(tmp_path, docker_image, max_turns=len(commands), container_disk="200m", run_id=run_id)
    policy = MeasuringScript(commands, run_id=run_id, at=2)
    (output,) = await rollouts.run_group(env, policy, "laneMerge")
    (record,) = rollouts.trajectories(tmp_path)
    assert [t.command for t in record.turns] == commands, "not every step of the attack ran"
    check_rollout(output, record)  # not masked
    said = record.turns[0].output
    assert "never" not in said and "disk limit" in said, said  # stopped during the command, with the message
    (held,) = policy.measured
    assert held <= LIMIT, f"{held / 2**30:.2f} GiB still on the host's disk after the stop (limit 200m)"
    if over:
        failed = record.turns[2].evaluation
        assert failed is not None and failed.status == "evaluation_failed" and "disk limit" in failed.error, failed
    else:
        honest_evaluation(record, 2)  # nothing over the limit is left: the evaluation is whole
    return record


@pytest.mark.timeout(400)
async def test_blocks_reserved_past_the_end_leave_the_host_at_the_stop(tmp_path, docker_image):
    record = await reserve_then_look(tmp_path, docker_image, RESERVE, SIZES)
    sizes = record.turns[1].output
    for name, size in (("f1", 0), ("f2", 0), ("f3", 0), ("s", 100 << 20)):
        assert f"/home/agent/{name} {size}" in sizes, sizes  # the files are still there, their sizes kept
    assert "(deleted)" in sizes, sizes  # the deleted file is still held open by the shell


# Hidden from a free done by path as the agent: a file of mode 0 (its owner cannot open it), one under a folder of
# mode 0 (cannot be reached), one with data before the reservation (its content must stay), a link to root's file.
HIDDEN = (
    "cd ~ && head -c 1M /dev/urandom > data && md5sum data > sum && fallocate -n -o 1M -l 1G data && touch ro && "
    "fallocate -n -l 1G ro && chmod 0 ro && mkdir shut && touch shut/x && fallocate -n -l 1G shut/x && chmod 0 shut "
    "&& ln -s /etc/passwd link && sleep 8; echo never"
)
LOOK = "cd ~ && stat -c '%n %s %a' data ro shut/ && md5sum -c sum && chmod 700 shut && stat -c '%n %s %a' shut/x"


@pytest.mark.timeout(400)
async def test_reserved_blocks_hidden_from_their_owner_are_freed_too(tmp_path, docker_image):
    record = await reserve_then_look(tmp_path, docker_image, HIDDEN, LOOK)
    said = record.turns[1].output
    said = re.sub(r"shut/ \d+ ", "shut/ ", said)  # a folder's size is the file system's (4096 on ext4, 15 on xfs)
    for line in ("data 1048576 644", "ro 0 0", "shut/ 0", "data: OK", "shut/x 0 644"):
        assert line in said, said  # sizes, modes and content as the agent left them


# Without -n the size grows (counted by the engine, each file capped by max_file_size, 4g), but one call still
# reserves it all at once: 3 x 1 GiB of never-written blocks, freed at the stop (holes read as zeros, as they do).
INSIDE = (
    "cd ~ && head -c 1M /dev/urandom > w && md5sum < w > sum && for i in 1 2 3; do fallocate -l 1G g$i || break; "
    "done && fallocate -o 1M -l 1G w && sleep 8; echo never"
)
LOOK_INSIDE = "cd ~ && stat -c '%n %s' g3 w && head -c 1M w | md5sum -c sum && cmp -n 1G g1 /dev/zero && echo zeros"


@pytest.mark.timeout(400)
async def test_blocks_reserved_inside_the_size_leave_the_host_at_the_stop(tmp_path, docker_image):
    record = await reserve_then_look(tmp_path, docker_image, INSIDE, LOOK_INSIDE, over=True)
    said = record.turns[1].output
    assert "g3 1073741824" in said and "w 1074790400" in said, said  # sizes kept: still over the limit
    assert "-: OK" in said and "zeros" in said, said  # the data kept, the reserved range still zeros
