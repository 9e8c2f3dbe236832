"""Issue 62, root cause 3: where the engine cannot size a container (overlay2 on ext4), the watch counted only what
it could name. A file deleted and then held only by a descriptor in flight (SCM_RIGHTS on a unix socket) or only by
a memory mapping is in no ``du`` and no ``/proc/PID/fd``: gigabytes past a 200m limit, unseen and never stopped.
Now the container's writable layer is a file system of its own (``air.sandbox.disk_image``): the kernel answers
the write past the limit with ENOSPC (a mapping's with SIGBUS), in our image and in an MLGym-shaped one, and the
file system, its loop device and its image go with the container (closed, or reaped as a dead run's orphan).

Run on today's watch (``disk_layer="watch"``: ``AIR_TEST_DISK_LAYER=watch``) the attacks write their gigabyte."""

from __future__ import annotations

import contextlib
import os
import re
import time
from pathlib import Path

import docker
import pytest

from air.sandbox.config import LABEL_HOST, LABEL_PID, LABEL_STARTED, SandboxConfig, owner_labels
from air.sandbox.container import Sandbox, _create_and_start, container_kwargs
from air.sandbox.storage import can_size, storage_driver
from tests.mlgym_image import MLGYM_ENV, standin_image

LIMIT = 200 << 20
SLACK = 8 << 20  # what ext4's own blocks and a chunk in flight may add
LAYER = os.environ.get("AIR_TEST_DISK_LAYER", "auto")

# Relays the file between two ends of a socket pair: received, 64 MiB written, sent back, every other descriptor
# closed; so between two writes the file exists only in flight. Then (``hold``) a background process keeps the
# pair, the file in flight, or (``close``) it closes both ends.
RELAY = r"""
import os, socket, sys, time
mode, total = sys.argv[1], int(sys.argv[2])
path = os.path.expanduser("~/held")
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
os.unlink(path)
a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
socket.send_fds(a, [b"f"], [fd])
os.close(fd)
chunk, written, error = b"x" * (64 << 20), 0, "none"
while written < total:
    _, (fd,), _, _ = socket.recv_fds(b, 1, 1)
    try:
        written += os.write(fd, chunk)
    except OSError as exc:
        error = exc.strerror
        socket.send_fds(a, [b"f"], [fd])
        os.close(fd)
        break
    socket.send_fds(a, [b"f"], [fd])
    os.close(fd)
    time.sleep(0.05)
print("written", written, "error", error, flush=True)
if mode == "hold" and os.fork() == 0:
    os.setsid()
    time.sleep(600)
a.close(); b.close()
"""

# Maps a deleted file, closes its descriptor, writes through the mapping (a write the file system cannot place
# is SIGBUS), then keeps the mapping in a background process.
MAPPED = r"""
import mmap, os, sys, time
total = int(sys.argv[1])
path = os.path.expanduser("~/mapped")
fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o600)
os.unlink(path)
os.ftruncate(fd, total)
view = mmap.mmap(fd, total)
os.close(fd)
chunk = b"x" * (16 << 20)
for offset in range(0, total, len(chunk)):
    view[offset : offset + len(chunk)] = chunk
    print("mapped", offset + len(chunk), flush=True)
view.flush()
print("all written", flush=True)
if os.fork() == 0:
    os.setsid()
    time.sleep(600)
"""


@pytest.fixture(scope="module")
def unsized(docker_image: str) -> str:
    driver = storage_driver(docker.from_env())
    if can_size(driver):
        pytest.skip(f"this engine ({driver}) sizes containers itself: no file system of their own")
    return driver


def small(image: str, **kwargs) -> SandboxConfig:
    settings = dict(image=image, run_id="pytest", cpus=1.0, memory="1g", tmp_size="256m", disk="200m")
    return SandboxConfig(**{**settings, "disk_layer": LAYER, **kwargs})


def layer_of(sandbox: Sandbox) -> Path:
    from air.sandbox.disk_image import own_layer

    sandbox.container.reload()
    layer = own_layer(sandbox.container)
    assert layer is not None, "the container's layer is not a file system of its own"
    return layer


def used_bytes(layer: Path) -> int:
    fs = os.statvfs(layer)
    return (fs.f_blocks - fs.f_bfree) * fs.f_frsize


def loop_of(layer: Path) -> str:
    """The loop device mounted at ``layer`` (from this process's mount table)."""
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        if fields[4] == str(layer):
            return fields[fields.index("-") + 2]
    raise AssertionError(f"{layer} is not mounted")


def released(layer: Path, loop: str, container_id: str) -> None:
    """Nothing of the container's own file system is left: no mount, no folder, no loop device holding its image.
    Every loop device is asked, not only ``loop`` (the one it had): on a shared host another container's image may
    take that device the moment it is freed."""
    assert not os.path.ismount(layer) and not layer.exists(), layer
    holding = []
    for backing in Path("/sys/block").glob("loop*/loop/backing_file"):
        with contextlib.suppress(OSError):  # a device detaching as it is read
            if f"/{container_id}.img" in backing.read_text():
                holding.append(backing.parent.parent.name)
    assert not holding, f"{', '.join(holding)} still hold(s) the image of {container_id} (it had {loop})"


def python_of(image: str) -> str:
    return f"{MLGYM_ENV}/bin/python" if "mlgym" in image else "python3"


async def attack(sandbox: Sandbox, script: str, *args: str) -> str:
    await sandbox.write_file("/home/agent/attack.py", script, owner="agent")
    result = await sandbox.run(f"{python_of(sandbox.config.image)} ~/attack.py {' '.join(args)}; echo rc $?", 120)
    return result.output


@pytest.fixture(scope="module")
def mlgym(docker_image: str) -> str:
    return standin_image(docker_image)


@pytest.fixture(params=["ours", "mlgym"])
def image(request: pytest.FixtureRequest, docker_image: str, unsized: str) -> str:
    return request.getfixturevalue("mlgym") if request.param == "mlgym" else docker_image


@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", ["hold", "close"])
async def test_a_file_held_only_in_flight_stops_at_the_limit(image: str, mode: str):
    sandbox = await Sandbox.create(small(image))
    try:
        output = await attack(sandbox, RELAY, mode, str(1 << 30))
        found = re.search(r"written (\d+) error (.*)", output)
        assert found, output
        written, error = int(found.group(1)), found.group(2)
        assert error == "No space left on device" and written <= LIMIT, output
        layer = layer_of(sandbox)
        assert used_bytes(layer) <= LIMIT + SLACK, used_bytes(layer)
        # The agent's own processes gone, the file goes with them: the space is the agent's again.
        await sandbox.run("pkill -u agent -f attack.py; sleep 1; true")
        assert used_bytes(layer) < 16 << 20, used_bytes(layer)
        fits = await sandbox.run("head -c 100M /dev/zero > ~/workspace/fits && echo fits")
        assert fits.output.strip() == "fits", fits.output
    finally:
        await sandbox.destroy()


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_a_file_held_only_by_a_mapping_stops_at_the_limit(image: str):
    sandbox = await Sandbox.create(small(image))
    try:
        output = await attack(sandbox, MAPPED, str(768 << 20))
        assert "all written" not in output and "rc 135" in output, output  # SIGBUS: 128 + 7
        mapped = max(int(n) for n in re.findall(r"mapped (\d+)", output))
        assert mapped <= LIMIT + (16 << 20), output
        assert used_bytes(layer_of(sandbox)) <= LIMIT + SLACK
    finally:
        await sandbox.destroy()


@pytest.mark.docker
@pytest.mark.timeout(120)
async def test_the_file_system_goes_with_its_container(docker_image: str, unsized: str):
    sandbox = await Sandbox.create(small(docker_image))
    layer = layer_of(sandbox)
    loop = loop_of(layer)
    assert not sandbox.disk.enabled  # the kernel keeps the limit: no watch
    # The workspace as the tasks lay it out (root's copies, then the agent's), and moved by the agent.
    await sandbox.write_file("/home/agent/workspace/data.txt", "rows\n", owner="agent")
    moved = await sandbox.run("cd ~ && mv workspace w2 && mv w2 workspace && cat workspace/data.txt")
    assert moved.output == "rows\n", moved.output
    await sandbox.destroy()
    released(layer, loop, sandbox.container.id)


@pytest.mark.docker
@pytest.mark.timeout(120)
async def test_the_orphan_reaper_releases_a_dead_runs_file_system(
    docker_image: str, unsized: str, monkeypatch: pytest.MonkeyPatch
):
    from air.sandbox import disk_image, removal

    client = docker.from_env()
    config = small(docker_image, disk_layer="loop")
    # An owner long dead, on a host of its own: the reaper sees this orphan only, not the shared engine's others.
    host = f"pytest-orphan-{os.getpid()}"
    labels = {**owner_labels("pytest-orphan"), LABEL_PID: "999999999", LABEL_STARTED: "1.0", LABEL_HOST: host}
    monkeypatch.setattr(removal.socket, "gethostname", lambda: host)
    own_fs = disk_image.LayerFs(config, disk_image.wanted(config, storage_driver(client), client))
    container = _create_and_start(client, container_kwargs(config, labels), own_fs.prepare)
    assert own_fs.confirm(container)
    layer = own_fs.layer
    assert layer is not None
    loop = loop_of(layer)
    assert removal.reap_orphans(client) == [container.id]
    released(layer, loop, container.id)


def test_a_stale_image_is_swept_and_a_fresh_one_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    from air.sandbox import disk_image

    root = tmp_path / "docker"
    (root / "overlay2").mkdir(parents=True)
    monkeypatch.setattr(disk_image, "host_problem", lambda client: (root, ""))
    images = tmp_path / disk_image.IMAGES
    images.mkdir()
    stale, fresh = images / "a.img", images / "b.img"
    stale.write_bytes(b""), fresh.write_bytes(b"")
    os.utime(stale, (time.time() - 2 * disk_image.STALE_S,) * 2)
    assert disk_image.sweep(None) == 1  # type: ignore[arg-type]
    assert not stale.exists() and fresh.exists()


def test_the_image_leaves_about_the_limit_for_files():
    from air.sandbox.disk_image import image_bytes

    assert image_bytes(200 << 20) == (200 << 20) + (200 << 20) // 32 + (4 << 20)


def test_loop_on_a_host_that_cannot_names_the_setting(monkeypatch: pytest.MonkeyPatch, caplog):
    from air.sandbox import disk_image
    from air.sandbox.errors import SandboxStartError

    monkeypatch.setattr(disk_image, "host_problem", lambda client: (None, "this process is not root"))
    with pytest.raises(SandboxStartError, match=r"disk_layer is 'loop'.*this process is not root.*'auto' or 'watch'"):
        disk_image.wanted(small("x", disk_layer="loop"), "overlay2 on extfs", None)  # type: ignore[arg-type]
    disk_image._said.clear()
    with caplog.at_level("WARNING", logger="air.sandbox.disk_image"):
        for _ in range(3):  # auto: the watch, said once
            assert disk_image.wanted(small("x", disk_layer="auto"), "overlay2 on extfs", None) is None  # type: ignore[arg-type]
    assert len([r for r in caplog.records if "watched instead" in r.getMessage()]) == 1
    assert disk_image.wanted(small("x", disk_layer="watch"), "overlay2 on extfs", None) is None  # type: ignore[arg-type]
    assert disk_image.wanted(small("x"), "btrfs", None) is None  # type: ignore[arg-type]  # the engine's quota
