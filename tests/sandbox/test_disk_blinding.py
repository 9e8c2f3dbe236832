"""Issue 39, item 4: an agent that blinds the disk watch (air/sandbox/disk_watch.py) where the engine cannot size
a container (overlay2 on ext4, this machine). Each attack as the agent played it, against a 200m limit: a path
past PATH_MAX (the engine's size became -1, read as -1 bytes), 250,000 empty folders (0 bytes to the engine, a
slow check after which a 300 MiB file went unseen), files deleted but held open (never counted). Each must now
stop the writer or fail the command with the limit's message, and the evaluation's question
(``Sandbox.over_disk_limit``) must say over until the agent deletes what it made."""

from __future__ import annotations

import re

import pytest

from air.sandbox.config import SandboxConfig
from air.sandbox.container import Sandbox
from air.sandbox.disk_watch import ENTRY_BYTES, MIN_DELAY_S, DiskWatch, Measure
from rigs.patience import backstop

LIMIT = re.compile(r"(the sandbox holds [\d.]+[KMG]? of its 200M disk limit|cannot be counted against its 200M disk)")
# 300 folders of 30 characters, one in the other: a working directory 9,000 bytes long.
A30 = "a" * 30
LONG_PATH = f"mkdir -p ~/d && cd ~/d && for i in $(seq 300); do mkdir -p {A30} && cd {A30} || break; done; cd ~"
# 900 MiB in 4 MiB files, a moment apart (were the watch blind, all of them).
WRITE_900M = "for i in $(seq 225); do head -c 4M /dev/zero > ~/big$i; sleep 0.02; done; echo never"
FOLDERS = "python3 -c \"import os; os.mkdir('m'); [os.mkdir(f'm/{i}') for i in range(250000)]; print('never')\""
# Eight 32 MiB files, each deleted before it is written and held open by a process left running.
HOLD = (
    "nohup python3 -c \"import os, time\nfiles = []\nfor i in range(8):\n    f = open(f'h{i}', 'wb')\n"
    "    os.unlink(f'h{i}')\n    f.write(bytes(32 << 20)); f.flush(); files.append(f)\ntime.sleep(600)\" "
    ">/dev/null 2>&1 & echo started"
)


def config(image: str = "x", **kwargs) -> SandboxConfig:
    settings = dict(image=image, run_id="pytest", cpus=1.0, memory="1g", tmp_size="512m", disk="200m", disk_check_s=0.5)
    settings["disk_layer"] = "watch"  # as where this process cannot loop-mount (test_disk_image: the kernel's)
    return SandboxConfig(**{**settings, "max_file_size": "512m", **kwargs})


class _Api:
    def __init__(self, info):
        self.info = info

    def _url(self, *args):
        return "/url"

    def _get(self, url, **kwargs):
        return self.info

    def _result(self, response, json):
        return response


class _Container:
    id = short_id = "c0ffee"

    def __init__(self, size, found=(3, 0, None)):
        info = {"State": {"Running": True}}
        if size != "missing":
            info["SizeRw"] = size
        self.client = type("Client", (), {"api": _Api(info)})()
        self.found = found


@pytest.mark.parametrize("size", [-1, "missing", None])
def test_a_size_the_engine_cannot_give_is_a_problem_not_under_the_limit(size, monkeypatch):
    watch = DiskWatch(_Container(size), config(), None, enabled=True)  # type: ignore[arg-type]
    monkeypatch.setattr(watch, "_probe", lambda: (3 * ENTRY_BYTES, 0, None))
    measure = watch._measure()
    assert measure.used is None and "could not size it" in (measure.problem or ""), measure
    watch.used, watch.problem = measure.used, measure.problem
    assert watch.over and watch.could_be_over() and "cannot be counted" in watch.message()


def test_entries_and_files_deleted_but_open_count_on_top_of_the_engines_bytes(monkeypatch):
    watch = DiskWatch(_Container(1000), config(), None, enabled=True)  # type: ignore[arg-type]
    monkeypatch.setattr(watch, "_probe", lambda: (50_000 * ENTRY_BYTES, 7 << 20, None))
    assert watch._measure() == Measure(1000 + 50_000 * ENTRY_BYTES + (7 << 20))
    monkeypatch.setattr(watch, "_probe", lambda: (0, 0, "more than 200,000 files and folders: delete some"))
    assert watch._measure() == Measure(None, "more than 200,000 files and folders: delete some")


def test_a_slow_check_never_pushes_the_next_past_disk_check_s():
    watch = DiskWatch(None, config(disk="20g", disk_check_s=10), None, enabled=True)  # type: ignore[arg-type]
    watch.used, watch.cost_s = 0, 9.0  # the most a check may take: the probe's budget
    assert watch.next_delay() == 10
    watch.problem, watch.cost_s = "a path longer than 4096 bytes", 0.0
    assert watch.next_delay() == MIN_DELAY_S  # not measurable: asked again soon


@pytest.fixture
async def sandbox(docker_image):
    box = await Sandbox.create(config(docker_image))
    if not box.disk.enabled:
        await box.destroy()
        pytest.skip("this engine sizes containers itself: no watch to blind")
    try:
        yield box
    finally:
        await box.destroy()


async def freed(box: Sandbox, what: str) -> None:
    # While the watch cannot count (a problem), each check (every 0.5 s) stops the command in flight, this rm
    # too when the host is slow: as an agent would, run it again; each run deletes more (seen beside a second suite).
    for _ in range(20):
        gone = await box.run(f"rm -rf {what} && echo freed", timeout=backstop(120))
        if gone.output.endswith("freed\n") or not gone.halted:
            break
    assert gone.output.endswith("freed\n"), gone.output
    assert await box.over_disk_limit() is None
    after = await box.run("head -c 4M /dev/zero > ~/after && echo ok")
    assert after.exit_code == 0 and after.output == "ok\n", after.output


@pytest.mark.docker
@pytest.mark.timeout(240)
async def test_a_path_past_path_max_does_not_blind_the_watch(sandbox: Sandbox):
    await sandbox.run(LONG_PATH, timeout=backstop(60))
    writer = await sandbox.run(WRITE_900M, timeout=backstop(120))
    assert writer.exit_code != 0 and "never" not in writer.output and LIMIT.search(writer.output), writer.output
    assert "path longer than 4096 bytes" in writer.output, writer.output
    written = await sandbox.run("du -sm ~ 2>/dev/null | cut -f1")
    # Stopped before its 900 MiB. How far past the limit it got is the time to the first check: under 300 MiB
    # alone, 818 MiB once in CI beside the heavy tests (PROJECT_NOTES: the disk watch, still open).
    assert int(written.output.split()[0]) < 880, written.output
    assert "path longer than 4096 bytes" in (await sandbox.over_disk_limit() or "")
    await freed(sandbox, "~/d ~/big*")


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_empty_folders_count_and_a_big_file_after_them_is_seen(sandbox: Sandbox):
    folders = await sandbox.run(FOLDERS, timeout=backstop(200))
    assert folders.exit_code != 0 and "never" not in folders.output and LIMIT.search(folders.output), folders
    made = await sandbox.run("ls m | wc -l")
    assert int(made.output.split()[0]) < 250_000 and LIMIT.search(made.output), made.output  # stopped, still over
    big = await sandbox.run("head -c 300M /dev/zero > big; echo done")
    assert big.exit_code != 0 and LIMIT.search(big.output), big.output
    assert await sandbox.over_disk_limit() == sandbox.disk.message()
    assert sandbox.disk.cost_s < 10, sandbox.disk.cost_s  # bounded: the probe's own budget
    await freed(sandbox, "m big")


@pytest.mark.docker
@pytest.mark.timeout(240)
async def test_files_deleted_but_held_open_count_and_their_holder_is_killed(sandbox: Sandbox):
    started = await sandbox.run(HOLD)
    assert started.output.strip().endswith("started"), started.output
    waiting = await sandbox.run("sleep 60; echo never", timeout=90)
    assert waiting.halted and "never" not in waiting.output and LIMIT.search(waiting.output), waiting.output
    left = await sandbox.run("pgrep -u agent -c python3; true")
    assert left.output.split()[0] == "0", left.output  # the holder is gone, and with it the files
    assert await sandbox.over_disk_limit() is None


# The holder above, made non-dumpable first (PR_SET_DUMPABLE 0): the agent cannot read its /proc/PID/fd, so
# the watch cannot count its files. Asked again a few times (a process changing uid is unreadable for a
# moment), it stays hidden: a problem, over the limit, and the holder killed like any writer.
HIDDEN_HOLD = HOLD.replace("import os, time\n", "import ctypes, os, time\nctypes.CDLL(None).prctl(4, 0, 0, 0, 0)\n")


@pytest.mark.docker
@pytest.mark.timeout(240)
async def test_a_holder_that_hides_its_open_files_is_a_problem_and_is_killed(sandbox: Sandbox):
    assert "prctl(4, 0" in HIDDEN_HOLD
    started = await sandbox.run(HIDDEN_HOLD)
    assert started.output.strip().endswith("started"), started.output
    waiting = await sandbox.run("sleep 60; echo never", timeout=90)
    assert waiting.halted and "never" not in waiting.output and LIMIT.search(waiting.output), waiting.output
    assert "hides its open files" in waiting.output, waiting.output
    left = await sandbox.run("pgrep -u agent -c python3; true")
    assert left.output.split()[0] == "0", left.output
    assert await sandbox.over_disk_limit() is None
