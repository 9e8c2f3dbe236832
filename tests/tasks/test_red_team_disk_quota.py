"""Issue 50, item 2, on an engine with a disk quota (a second engine on btrfs, as scripts/engine_quota.sh gives a
host whose xfs has no quotas): `fallocate -n` far past the limit and a folder bomb, through the rollout path. The
container never holds more than its limit on the host's disk (its subvolume's quota group, read on the host while
the rollout runs), each attack fails inside with "Disk quota exceeded" / "No space left on device", the rollout
goes on, and once the agent deletes its files its evaluation is whole.

Before: the engine's btrfs ran the full quotas dockerd turns on, and on Linux 6.18 removing one container (any
rollout's end) marks their data inconsistent; from then on no write is counted, and 64 x 32 MiB of reservations
all went in past a 1g quota.
"""

from __future__ import annotations

import subprocess
import threading

import pytest

from air.sandbox.container import reset_docker_client
from tests.red_team import check_rollout, honest_evaluation, run_attack
from tests.second_engine import SecondEngine, quota_engine  # noqa: F401  (fixture)

pytestmark = [pytest.mark.docker, pytest.mark.xdist_group("one_at_a_time")]

LIMIT = 1 << 30
FULL = ("Disk quota exceeded", "No space left on device")
# 2 GiB of reservations against a 1g limit, kept: the folder bomb then finds the quota full. `sync` commits each
# (with full quotas gone inconsistent, only reservations within one transaction were still held to the limit).
RESERVE = "cd ~ && for i in $(seq 64); do touch f$i && fallocate -n -l 32M f$i && sync || break; done; echo went on"
FOLDERS = (
    "cd ~ && python3 -c \"import os; os.mkdir('m'); [os.mkdir(f'm/{i}') for i in range(250000)]; print('never')\"; "
    "echo went on"
)


def held_bytes(engine: SecondEngine) -> int:
    """The most any running container of the engine holds on the host's disk: its subvolume's referenced bytes
    (quota group: data and metadata) or the blocks of its files (du), whichever is more."""
    data, most = engine.folder / "data", 0
    client = engine.client()
    try:
        containers = client.containers.list(ignore_removed=True)
    finally:
        client.close()
    for container in containers:
        mount_id = data / "image" / "btrfs" / "layerdb" / "mounts" / container.id / "mount-id"
        try:
            subvolume = data / "btrfs" / "subvolumes" / mount_id.read_text().strip()
        except OSError:  # removed meanwhile
            continue
        shown = subprocess.run(
            ["btrfs", "qgroup", "show", "--raw", "--sync", "-f", str(subvolume)], capture_output=True, text=True
        )
        rows = [line.split() for line in shown.stdout.splitlines() if line.startswith("0/")]
        du = subprocess.run(["du", "-s", "--block-size=1", str(subvolume / "home")], capture_output=True, text=True)
        most = max(most, int(rows[0][1]) if rows else 0, int(du.stdout.split()[0]) if du.stdout else 0)
    return most


@pytest.fixture
def on_quota_engine(quota_engine: SecondEngine, monkeypatch, docker_image):  # noqa: F811
    # One container created and removed first: with full quotas that removal alone stopped all counting.
    client = quota_engine.client()
    client.containers.run(
        docker_image,
        ["sh", "-c", "head -c 1M /dev/zero > /tmp/x"],
        remove=True,
        network_mode="none",
        storage_opt={"size": "1g"},
    )
    client.close()
    monkeypatch.setenv("DOCKER_HOST", quota_engine.address)
    reset_docker_client()
    yield quota_engine
    reset_docker_client()


@pytest.mark.timeout(600)
async def test_fallocate_and_a_folder_bomb_stop_at_the_quota_through_the_rollout_path(
    tmp_path, docker_image, on_quota_engine: SecondEngine
):
    peak, done = [0], threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], held_bytes(on_quota_engine))
            done.wait(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    commands = [RESERVE, FOLDERS, "rm -rf ~/m ~/f*; ls ~", "validate"]
    try:
        output, record = await run_attack(tmp_path, docker_image, commands, container_disk="1g")
    finally:
        done.set()
        sampler.join()
    check_rollout(output, record)  # not masked
    # Its data root (and dockerd's bind mount of it) without atime: else removing a container whose quota is full
    # commits a transaction for each folder it reads, minutes under I/O load.
    mounts = subprocess.run(
        ["findmnt", "-R", "-n", "-o", "OPTIONS", str(on_quota_engine.folder / "data")], capture_output=True, text=True
    )
    assert mounts.stdout and all("noatime" in line.split(",") for line in mounts.stdout.split()), mounts.stdout
    for index in (0, 1):  # each attack failed inside, at the quota, and the agent's command went on
        said = record.turns[index].output
        assert any(full in said for full in FULL) and "went on" in said and "never" not in said, said
        assert "disk limit" not in said, said  # the quota, not the watch
    assert 0 < peak[0] <= LIMIT, peak[0]  # never more than the limit on the host's disk
    honest_evaluation(record, 3)  # files deleted: the evaluation is whole
