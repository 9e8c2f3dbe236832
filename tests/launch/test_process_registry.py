"""Recorded process trees against real processes: identity (pid + start time + uid), sessions, stopping."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from air.launch.process_control import live_processes, root_alive, same_process, snapshot, stop_processes
from air.launch.process_records import ProcessRecord, forget, load_records, record_launch, records_dir, state_dir

# Root of a small tree: one child `sleep` it keeps, and one `sleep` started by a helper that exits at
# once (so that sleep is re-parented to init). Prints the two pids and start times, then waits for stdin.
TREE = textwrap.dedent(
    """
    import subprocess, sys
    import psutil
    quiet = dict(stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    kept = subprocess.Popen(["sleep", "300"], **quiet)
    helper = (
        "import subprocess, psutil; q = subprocess.DEVNULL; "
        "p = subprocess.Popen(['sleep', '300'], stdin=q, stdout=q, stderr=q); "
        "print(p.pid, psutil.Process(p.pid).create_time(), flush=True)"
    )
    orphan = subprocess.run([sys.executable, "-c", helper], capture_output=True, text=True, check=True).stdout
    print(kept.pid, psutil.Process(kept.pid).create_time(), orphan.strip(), flush=True)
    sys.stdin.read()
    """
)


@pytest.fixture
def spawn() -> Iterator:
    """Start processes; teardown kills those still running, plus extra (pid, create_time) pairs noted."""
    started: list[subprocess.Popen] = []
    strays: list[tuple[int, float]] = []

    def start(argv: list[str], **kwargs) -> subprocess.Popen:
        proc = subprocess.Popen(argv, **kwargs)
        started.append(proc)
        return proc

    start.strays = strays  # type: ignore[attr-defined]
    yield start
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.wait()
    for pid, create_time in strays:
        leftover = same_process(pid, create_time, os.getuid())
        if leftover is not None:
            leftover.kill()


def _start_tree(spawn) -> tuple[subprocess.Popen, tuple[int, float], tuple[int, float]]:
    root = spawn(
        [sys.executable, "-c", TREE], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    fields = root.stdout.readline().split()
    assert len(fields) == 4, f"tree root printed {fields!r}"
    kept, orphan = (int(fields[0]), float(fields[1])), (int(fields[2]), float(fields[3]))
    spawn.strays.extend([kept, orphan])
    return root, kept, orphan


def test_state_dir_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert state_dir() == tmp_path / "state"
    monkeypatch.delenv("AIR_STATE_DIR")
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg"))
    assert state_dir() == tmp_path / "xdg" / "air"
    monkeypatch.delenv("XDG_STATE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert state_dir() == tmp_path / "home" / ".local" / "state" / "air"
    assert state_dir(tmp_path / "explicit") == tmp_path / "explicit"


def test_record_launch_writes_a_record_that_loads_back(spawn, air_state_dir: Path) -> None:
    proc = spawn(["sleep", "300"], start_new_session=True)
    record = record_launch(proc.pid, "rl", ["sleep", "300"], cwd="/somewhere", config="rl.toml")
    assert record.path.parent == air_state_dir / "processes"
    assert record.session_id == proc.pid  # a new session is led by its first process
    assert record.uid == os.getuid()
    records, problems = load_records()
    assert problems == []
    assert [r.model_dump() for r in records] == [record.model_dump()]
    assert records[0].path == record.path
    assert root_alive(record)
    assert [p.pid for p in live_processes(record)] == [proc.pid]
    forget(record)
    assert load_records() == ([], [])


def test_malformed_record_files_are_listed_not_fatal(spawn, air_state_dir: Path) -> None:
    proc = spawn(["sleep", "300"], start_new_session=True)
    good = record_launch(proc.pid, "rl", ["sleep"], cwd="/")
    folder = records_dir()
    (folder / "broken.json").write_text("{not json")
    (folder / "wrong.json").write_text('{"run_id": "x", "surprise": 1}')
    records, problems = load_records()
    assert [r.run_id for r in records] == [good.run_id]
    assert sorted(path.name for path, _ in problems) == ["broken.json", "wrong.json"]
    why = dict((path.name, reason) for path, reason in problems)
    assert "surprise" in why["wrong.json"] or "kind" in why["wrong.json"]


def test_a_reused_pid_is_not_ours(spawn) -> None:
    proc = spawn(["sleep", "300"], start_new_session=True)
    record = record_launch(proc.pid, "rl", ["sleep"], cwd="/")
    assert root_alive(record)  # the control: with the right start time it is ours
    impostor = record.model_copy(update={"root_create_time": record.root_create_time - 100})
    assert not root_alive(impostor)
    assert live_processes(impostor) == []  # neither as root nor through the (now foreign) session


def test_another_users_record_is_never_acted_on(spawn) -> None:
    proc = spawn(["sleep", "300"], start_new_session=True)
    record = record_launch(proc.pid, "rl", ["sleep"], cwd="/")
    assert live_processes(record)  # the control
    theirs = record.model_copy(update={"uid": os.getuid() + 1})
    assert live_processes(theirs) == []
    assert not root_alive(theirs)


def test_snapshot_finds_descendants_and_reparented_orphans(spawn) -> None:
    root, kept, orphan = _start_tree(spawn)
    assert psutil.Process(orphan[0]).ppid() != root.pid  # really re-parented, not a descendant any more
    record = record_launch(root.pid, "rl", ["tree"], cwd="/")
    snapshot(record)
    members = {m.pid for m in record.members}
    assert {kept[0], orphan[0]} <= members
    assert root.pid not in members
    on_disk, _ = load_records()
    assert {m.pid for m in on_disk[0].members} == members

    root.stdin.close()
    root.wait()
    assert not root_alive(record)
    assert {p.pid for p in live_processes(record)} == {kept[0], orphan[0]}


def test_session_scan_finds_orphans_never_seen_by_a_snapshot(spawn) -> None:
    root, kept, orphan = _start_tree(spawn)
    record = record_launch(root.pid, "rl", ["tree"], cwd="/")  # no snapshot: members empty
    root.stdin.close()
    root.wait()
    assert {p.pid for p in live_processes(record)} == {kept[0], orphan[0]}


def test_a_session_the_root_did_not_lead_is_never_scanned(spawn) -> None:
    root = spawn(["sleep", "300"])  # same session as pytest (and maybe the user's shell)
    record = record_launch(root.pid, "rl", ["sleep"], cwd="/")
    neighbour = spawn(["sleep", "300"])  # same session, same user, started after the root
    found = {p.pid for p in live_processes(record)}
    assert root.pid in found
    assert neighbour.pid not in found


def test_this_process_and_its_ancestors_are_never_included() -> None:
    record = record_launch(os.getpid(), "rl", ["pytest"], cwd="/")
    assert root_alive(record)  # it is alive and matches: only the self-guard keeps it out
    assert live_processes(record) == []


def test_stop_processes_reports_each_outcome(spawn) -> None:
    polite = spawn(["sleep", "300"])
    stubborn = spawn(
        [
            sys.executable,
            "-c",
            "import signal, sys, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(300)",
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert stubborn.stdout.readline().strip() == "ready"
    finished = spawn(["true"])
    handles = [psutil.Process(p.pid) for p in (polite, stubborn, finished)]
    finished.wait()
    outcomes = stop_processes(handles, grace=0.5)
    assert [(o.pid, o.outcome) for o in outcomes] == [
        (polite.pid, "terminated"),
        (stubborn.pid, "killed"),
        (finished.pid, "already gone"),
    ]
    assert "sleep 300" in outcomes[0].command
    assert not handles[0].is_running() and not handles[1].is_running()


def test_record_is_written_atomically(spawn) -> None:
    proc = spawn(["sleep", "300"], start_new_session=True)
    record = record_launch(proc.pid, "rl", ["sleep"], cwd="/")
    assert [p.name for p in record.path.parent.iterdir()] == [record.path.name]  # no temporary left
    assert ProcessRecord.model_validate_json(record.path.read_text()).model_dump() == record.model_dump()
