"""The launcher against real process trees: orphans stopped, look-alikes spared, signals forwarded."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil

from air.launch.launcher import _Forwarder, launch, shell_exit_code
from air.launch.process_control import same_process
from air.launch.process_records import load_records
from rigs.patience import backstop

# A stand-in for prime-rl's `rl`: a helper starts `sleep 300` and exits at once, so the sleep is
# re-parented to init (as vLLM workers are when their parent dies); then the "launcher" fails with 3.
FAKE_RL = textwrap.dedent(
    """
    import subprocess, sys
    helper = (
        "import subprocess, sys, psutil; q = subprocess.DEVNULL; "
        "p = subprocess.Popen(['sleep', '300'], stdin=q, stdout=q, stderr=q); "
        "open(sys.argv[1], 'w').write(f'{p.pid} {psutil.Process(p.pid).create_time()}')"
    )
    subprocess.run([sys.executable, "-c", helper, sys.argv[1]], check=True)
    sys.exit(3)
    """
)

# Runs launch() in its own process, so the test can signal it like a user pressing Ctrl-C.
LAUNCHER = textwrap.dedent(
    """
    import sys
    from air.launch.launcher import launch
    result = launch(sys.argv[1:], snapshot_interval=0.1, grace=5, on_event=lambda line: print(line, flush=True))
    sys.exit(result.exit_code)
    """
)

# A fake rl that writes its pid to <dir>/ready, and on SIGINT writes <dir>/got-sigint, then exits 0
# (or, with "stubborn", keeps running).
TRAPS_SIGINT = textwrap.dedent(
    """
    import os, signal, sys, time
    from pathlib import Path
    out, stubborn = Path(sys.argv[1]), sys.argv[2] == "stubborn"
    def on_int(sig, frame):
        (out / "got-sigint").write_text("yes")
        if not stubborn:
            sys.exit(0)
    signal.signal(signal.SIGINT, on_int)
    (out / "ready").write_text(str(os.getpid()))
    while True:
        time.sleep(0.05)
    """
)


def _wait_for(path: Path, timeout: float = backstop(30)) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.02)


def _kill_if_ours(pid_file: Path) -> None:
    if pid_file.exists():
        pid, create_time = pid_file.read_text().split()
        leftover = same_process(int(pid), float(create_time), os.getuid())
        if leftover is not None:
            leftover.kill()


def test_shell_exit_code() -> None:
    assert shell_exit_code(3) == 3
    assert shell_exit_code(-signal.SIGKILL) == 137


def test_orphans_are_stopped_and_look_alikes_spared(tmp_path: Path, air_state_dir: Path) -> None:
    script = tmp_path / "fake_rl.py"
    script.write_text(FAKE_RL)
    pid_file = tmp_path / "orphan.pid"
    bystander = subprocess.Popen(["sleep", "300"])  # same name, same user: not ours to stop
    events: list[str] = []
    try:
        result = launch(
            [sys.executable, str(script), str(pid_file)], snapshot_interval=0.1, grace=5, on_event=events.append
        )
        orphan_pid = int(pid_file.read_text().split()[0])
        assert result.exit_code == 3
        assert orphan_pid in {m.pid for m in result.record.members}
        assert [(o.pid, o.outcome) for o in result.leftovers_stopped] == [(orphan_pid, "terminated")]
        assert not psutil.pid_exists(orphan_pid) or psutil.Process(orphan_pid).status() == psutil.STATUS_ZOMBIE
        assert bystander.poll() is None
        assert load_records() == ([], [])  # nothing left, so the record was forgotten
        assert any("rl exited with 3; stopping 1 leftover processes" in line for line in events), events
    finally:
        bystander.kill()
        bystander.wait()
        _kill_if_ours(pid_file)


def test_a_clean_exit_leaves_nothing(tmp_path: Path) -> None:
    events: list[str] = []
    result = launch([sys.executable, "-c", "pass"], on_event=events.append, kind="trainer")
    assert result.exit_code == 0
    assert result.leftovers_stopped == []
    assert result.record.exit_code == 0 and result.record.finished_at
    assert load_records() == ([], [])
    assert any("trainer exited with 0; no leftover processes" in line for line in events), events


def _start_launcher(tmp_path: Path, mode: str) -> subprocess.Popen[str]:
    script = tmp_path / "traps.py"
    script.write_text(TRAPS_SIGINT)
    return subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, sys.executable, str(script), str(tmp_path), mode],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=os.environ.copy(),
    )


def test_sigint_is_forwarded_to_the_child(tmp_path: Path) -> None:
    launcher = _start_launcher(tmp_path, "polite")
    try:
        _wait_for(tmp_path / "ready")
        os.kill(launcher.pid, signal.SIGINT)
        output, _ = launcher.communicate(timeout=backstop(30))
    finally:
        launcher.kill()
    assert (tmp_path / "got-sigint").read_text() == "yes"  # only forwarding can deliver it: other session
    assert launcher.returncode == 0, output
    assert "SIGINT: passed to rl" in output


def test_a_sigint_before_the_child_is_attached_is_passed_on_and_said(tmp_path: Path) -> None:
    """Ctrl-C between the child's start and its attach (the launcher writes the record in between; under load the
    test above sent it there): the signal waits for the child, then is passed on and said as any other is."""
    events: list[str] = []
    forwarder = _Forwarder("rl", events.append)
    forwarder(signal.SIGINT, None)  # no child attached yet: held
    script = tmp_path / "traps.py"
    script.write_text(TRAPS_SIGINT)
    child = subprocess.Popen([sys.executable, str(script), str(tmp_path), "polite"], start_new_session=True)
    try:
        _wait_for(tmp_path / "ready")
        forwarder.attach(child)
        assert child.wait(timeout=backstop(30)) == 0
    finally:
        child.kill()
    assert (tmp_path / "got-sigint").read_text() == "yes"
    assert [line.split(" (")[0] for line in events] == ["SIGINT: passed to rl"], events


def test_a_second_sigint_kills_the_group(tmp_path: Path) -> None:
    launcher = _start_launcher(tmp_path, "stubborn")
    try:
        _wait_for(tmp_path / "ready")
        child_pid = int((tmp_path / "ready").read_text())
        os.kill(launcher.pid, signal.SIGINT)
        _wait_for(tmp_path / "got-sigint")
        assert launcher.poll() is None  # the child ignored the first one, so the launcher still waits
        os.kill(launcher.pid, signal.SIGINT)
        output, _ = launcher.communicate(timeout=backstop(30))
    finally:
        launcher.kill()
    assert launcher.returncode == 128 + signal.SIGKILL, output
    assert "rl was killed by SIGKILL" in output
    assert not psutil.pid_exists(child_pid) or psutil.Process(child_pid).status() == psutil.STATUS_ZOMBIE
