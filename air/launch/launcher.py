"""Start a process tree (prime-rl's ``rl``) so that nothing it spawns outlives it.

The command runs in a new session (its own process group), recorded by ``air.launch.process_records``
right after it starts; a background thread keeps adding its descendants to the record. SIGINT and
SIGTERM sent to us are forwarded to the child's process group (a second one SIGKILLs the group).
When the root exits, whatever of the recorded tree is still alive (vLLM workers, torchrun ranks)
is stopped; the record is deleted only once nothing of it is left, otherwise ``air clean`` finds it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
from pydantic import BaseModel

from air.launch.process_control import describe, live_processes, snapshot, stop_processes
from air.launch.process_records import ProcessRecord, StopOutcome, forget, now_iso, record_launch, save

log = logging.getLogger(__name__)

FORWARDED_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class LaunchResult(BaseModel):
    exit_code: int  # shell convention: 128 + N when the root was killed by signal N
    record: ProcessRecord
    leftovers_stopped: list[StopOutcome]


def shell_exit_code(returncode: int) -> int:
    """Popen's ``-N`` (killed by signal N) as a shell reports it: 128 + N."""
    return 128 - returncode if returncode < 0 else returncode


def _emitter(on_event: Callable[[str], None] | None) -> Callable[[str], None]:
    """``on_event`` made safe to call anywhere, signal handlers included (a failing printer never aborts)."""

    def emit(line: str) -> None:
        log.info("%s", line)
        if on_event is None:
            return
        try:
            on_event(line)
        except Exception as exc:  # e.g. a reentrant print from a signal handler
            log.warning("on_event failed on %r: %s", line, exc)

    return emit


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass  # group already empty


class _Forwarder:
    """Signal handler: pass SIGINT/SIGTERM to the child's group; a second one SIGKILLs the group."""

    def __init__(self, kind: str, emit: Callable[[str], None]) -> None:
        self.proc: subprocess.Popen[Any] | None = None
        self.kind = kind
        self.emit = emit
        self.count = 0
        self.pending: int | None = None  # a signal that came before the child existed
        self.hurry = threading.Event()  # cuts the grace period of the leftover stop

    def attach(self, proc: subprocess.Popen[Any]) -> None:
        """The child now exists: deliver a signal that arrived while it was being started, said as any other."""
        self.proc = proc
        if self.pending is not None:
            self._deliver(proc, signal.Signals(self.pending))

    def __call__(self, signum: int, frame: Any) -> None:
        self.count += 1
        if self.proc is None:
            self.pending = signum
            return
        if self.proc.returncode is not None:
            # Root already reaped: its pid may no longer name our group, so signal nobody; just hurry.
            self.hurry.set()
            self.emit(f"{signal.Signals(signum).name}: killing the leftovers of {self.kind} now")
            return
        self._deliver(self.proc, signal.Signals(signum))

    def _deliver(self, proc: subprocess.Popen[Any], sig: signal.Signals) -> None:
        """The first signal goes to the child's group as it is; any after it kills the group."""
        if self.count == 1:
            _signal_group(proc.pid, sig)
            self.emit(f"{sig.name}: passed to {self.kind} (process group {proc.pid}); send it again to kill it")
        else:
            self.hurry.set()
            _signal_group(proc.pid, signal.SIGKILL)
            self.emit(f"{sig.name} again: killing {self.kind}'s process group {proc.pid}")

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        """Handle the signals while inside; restore the previous handlers after (main thread only)."""
        if threading.current_thread() is not threading.main_thread():
            yield  # Python allows signal handlers only in the main thread
            return
        previous = {sig: signal.getsignal(sig) for sig in FORWARDED_SIGNALS}
        for sig in FORWARDED_SIGNALS:
            signal.signal(sig, self)
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler if handler is not None else signal.SIG_DFL)


def _keep_snapshotting(record: ProcessRecord, interval: float, stop: threading.Event) -> None:
    """Record descendants while the root runs, so ones re-parented later are still known as ours."""
    while not stop.wait(interval):
        try:
            snapshot(record)
        except Exception as exc:  # a full disk must not take the training run down
            log.warning("cannot update process record %s: %s", record.path, exc)


def _list(procs: list[psutil.Process], limit: int = 5) -> str:
    shown = ", ".join(f"{proc.pid} ({describe(proc, 40)})" for proc in procs[:limit])
    return shown + (f", and {len(procs) - limit} more" if len(procs) > limit else "")


def _exit_text(kind: str, returncode: int) -> str:
    if returncode < 0:
        return f"{kind} was killed by {signal.Signals(-returncode).name} (exit {shell_exit_code(returncode)})"
    return f"{kind} exited with {returncode}"


def launch(
    command: list[str],
    *,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
    kind: str = "rl",
    config: str | None = None,
    snapshot_interval: float = 2.0,
    grace: float = 10.0,
    state_dir: Path | str | None = None,
    on_event: Callable[[str], None] | None = None,
) -> LaunchResult:
    """Run ``command`` to the end, then stop what is left of its process tree.

    Output is inherited (the user sees the child's output). ``env`` is the child's whole
    environment, as for ``subprocess.Popen``; None inherits ours.
    """
    emit = _emitter(on_event)
    forwarder = _Forwarder(kind, emit)
    # Handlers go in before the child starts, so no signal can slip through between the two.
    with forwarder.installed():
        proc = subprocess.Popen(command, cwd=cwd, env=env, start_new_session=True)
        try:
            record = record_launch(proc.pid, kind, command, cwd or Path.cwd(), config=config, state_dir=state_dir)
        except BaseException:
            _signal_group(proc.pid, signal.SIGKILL)  # unrecorded, it could never be cleaned up later
            proc.wait()
            raise
        forwarder.attach(proc)
        emit(f"{kind} started as pid {proc.pid} (run {record.run_id}, record {record.path})")

        stop = threading.Event()
        watcher = threading.Thread(
            target=_keep_snapshotting, args=(record, snapshot_interval, stop), name="air-snapshot", daemon=True
        )
        watcher.start()
        try:
            returncode = proc.wait()
        finally:
            stop.set()
            watcher.join()

        record.finished_at, record.exit_code = now_iso(), shell_exit_code(returncode)
        try:
            snapshot(record)  # catches processes re-parented to init when the root died
        except OSError as exc:  # unwritable record: still stop what the in-memory record knows
            log.warning("cannot update process record %s: %s", record.path, exc)
        leftovers = live_processes(record)
        if leftovers:
            emit(f"{_exit_text(kind, returncode)}; stopping {len(leftovers)} leftover processes: {_list(leftovers)}")
            outcomes = stop_processes(leftovers, grace=grace, hurry=forwarder.hurry)
            emit("leftovers: " + ", ".join(f"{o.pid} {o.outcome}" for o in outcomes))
        else:
            emit(f"{_exit_text(kind, returncode)}; no leftover processes")
            outcomes = []

    remaining = live_processes(record)
    if remaining:
        save(record)
        emit(
            f"{len(remaining)} processes of run {record.run_id} are still alive ({_list(remaining)}); "
            f"they stay recorded in {record.path}: `air clean` stops them"
        )
    else:
        forget(record)
    return LaunchResult(exit_code=record.exit_code, record=record, leftovers_stopped=outcomes)
