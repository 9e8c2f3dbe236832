"""Round 2's disk attack on an engine that cannot size containers (overlay2 on ext4, this machine): an agent
wrote a 1 GB file in its home in one command. Now each file is capped and the container's writable size is
watched (air/sandbox/disk_watch.py); through the env's rollout path, going over is the agent's failure: its
commands and its evaluation fail with the reason, nothing is masked, and once it deletes the files the next
evaluation is whole."""

from __future__ import annotations

import docker
import pytest

from air.sandbox.storage import can_size, storage_driver
from tests.red_team import RESTORE, check_rollout, honest_evaluation, run_attack

pytestmark = pytest.mark.docker


@pytest.fixture(autouse=True)
def watched(monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch, as where this process cannot give a container a file system of its own (``disk_layer`` "auto"
    does on a root host with loop devices: the kernel's limit, tests/sandbox/test_disk_image.py)."""
    from air.sandbox import disk_image

    monkeypatch.setattr(disk_image, "wanted", lambda config, driver, client: None)


ONE_BIG_FILE = "head -c 100M /dev/zero > ~/big.bin; echo exit=$?; ls -la ~/big.bin"
MANY_FILES = "for i in $(seq 1 30); do head -c 6M /dev/zero > ~/part$i.bin || break; done; sleep 15; echo done"


@pytest.mark.timeout(300)
async def test_writing_past_the_bounds_fails_the_agent_not_the_rollout(tmp_path, docker_image):
    if can_size(storage_driver(docker.from_env())):
        pytest.skip("this engine sizes containers itself: tests/sandbox/test_disk_limits.py covers its quota")
    commands = [ONE_BIG_FILE, MANY_FILES, "validate", "rm -f ~/*.bin; du -sh ~", RESTORE, "validate"]
    output, record = await run_attack(
        tmp_path, docker_image, commands, container_disk="64m", container_max_file_size="8m"
    )
    check_rollout(output, record)  # not masked
    big = record.turns[0].output
    assert "File size limit exceeded" in big or "File too large" in big or "exit=153" in big, big
    assert "8388608" in big, big  # the file stopped at the cap
    assert "disk limit" in record.turns[1].output, record.turns[1].output
    over = record.turns[2].evaluation
    assert over is not None and over.status == "evaluation_failed" and "disk limit" in over.error, over
    honest_evaluation(record, 5)  # files deleted: the next evaluation is whole


# Issue 39, item 4, through the rollout path: a path past PATH_MAX made the engine's size -1 (read as -1 bytes)
# and 900 MiB went past a 200m limit; 250,000 empty folders counted 0 bytes. tests/sandbox/test_disk_blinding.py
# plays these and the files deleted but held open against the sandbox itself.
LONG_PATH = f"mkdir -p ~/d && cd ~/d && for i in $(seq 300); do mkdir {'a' * 30} && cd {'a' * 30} || break; done; cd ~"
WRITE_900M = "for i in $(seq 225); do head -c 4M /dev/zero > ~/big$i; sleep 0.02; done; echo never"
FOLDERS = "cd ~ && python3 -c \"import os; os.mkdir('m'); [os.mkdir(f'm/{i}') for i in range(250000)]; print('never')\""


@pytest.mark.timeout(400)
async def test_a_blinded_watch_still_fails_the_agent_not_the_rollout(tmp_path, docker_image):
    if can_size(storage_driver(docker.from_env())):
        pytest.skip("this engine sizes containers itself: tests/sandbox/test_disk_limits.py covers its quota")
    commands = [LONG_PATH, WRITE_900M, "validate", "cd ~ && rm -rf ~/d ~/big*", FOLDERS, "validate"]
    commands += ["rm -rf ~/m; ls ~", "validate"]
    output, record = await run_attack(
        tmp_path, docker_image, commands, container_disk="200m", container_max_file_size="64m"
    )
    check_rollout(output, record)  # not masked
    for index in (1, 4):  # the writer stopped with the limit's message
        said = record.turns[index].output
        assert "never" not in said and "disk limit" in said, said
    assert "path longer than 4096 bytes" in record.turns[1].output, record.turns[1].output
    for index in (2, 5):
        over = record.turns[index].evaluation
        assert over is not None and over.status == "evaluation_failed" and "disk limit" in over.error, over
    assert "disk limit" not in record.turns[6].output, record.turns[6].output
    honest_evaluation(record, 7)  # files deleted: the next evaluation is whole


# Issue 50, item 2: blocks the engine's size never sees. `fallocate -n` reserves blocks while the file's size
# stays 0 (SizeRw 0; max_file_size does not apply): 6 GiB went past a 200m limit, never stopped. A file of 100M
# with 1G reserved past its end. And 250,000 empty folders as the container's first command: the probe (which
# alone sees folders) was asked only 30 s after the start, and 982 MiB landed within the one command.
RESERVE = (
    "cd ~ && for i in 1 2 3; do touch f$i && fallocate -n -l 1G f$i || break; done; truncate -s 100M s && "
    "fallocate -n -o 100M -l 1G s; stat -c '%n %s %b' f1 s; sleep 8; echo never"
)
FIRST_FOLDERS = FOLDERS.replace("print('never')", "print('never'); import time; time.sleep(8)")


@pytest.mark.timeout(400)
@pytest.mark.parametrize(
    ("attack", "clean", "held"), [(RESERVE, "rm -f ~/f? ~/s", False), (FIRST_FOLDERS, "rm -rf ~/m", True)]
)
async def test_reserved_blocks_and_folders_are_counted_within_the_command(tmp_path, docker_image, attack, clean, held):
    if can_size(storage_driver(docker.from_env())):
        pytest.skip("this engine sizes containers itself: tests/sandbox/test_disk_quota.py covers its quota")
    commands = [attack, "validate", f"{clean}; ls ~", "validate"]
    output, record = await run_attack(tmp_path, docker_image, commands, container_disk="200m")
    check_rollout(output, record)  # not masked
    said = record.turns[0].output
    assert "never" not in said and "disk limit" in said, said  # stopped during the command, with the message
    over = record.turns[1].evaluation
    if held:
        assert over is not None and over.status == "evaluation_failed" and "disk limit" in over.error, over
    else:  # the stop freed the reserved blocks (tests/tasks/test_red_team_fallocate.py): nothing is over
        honest_evaluation(record, 1)
    assert "disk limit" not in record.turns[2].output, record.turns[2].output
    honest_evaluation(record, 3)  # files deleted: the next evaluation is whole
