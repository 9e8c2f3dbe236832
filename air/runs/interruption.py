"""A run stopped part way keeps only true files: each rollout Ctrl-C cut short records why and no reward,
the summary counts what is on disk, and a file is either whole or absent.

Ctrl-C cancels the run's task and with it every rollout in flight; each rollout's clean-up still writes
its trajectory. ``GracefulInterrupt`` makes that orderly and tells the env's core why first, so those
records say "interrupted". ``census`` reads the trajectories back, so the summary of a stopped run agrees
with its folder: finished rollouts per step, and the cancelled ones.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air.env.trajectories import write_atomically

INTERRUPTED = "interrupted (Ctrl-C) before it ended: no reward"
TERMINATED = "terminated (SIGTERM) before it ended: no reward"
SAME_KEYPRESS_S = 1.0
RECORDING_WAIT_S = 30.0  # a rollout cut short only writes its record: seconds at most


class Terminated(BaseException):
    """SIGTERM stopped a command the way Ctrl-C does (its rollout cancelled, its container removed): the
    command line says so in one line and exits 143 (128 + SIGTERM). A BaseException, as KeyboardInterrupt:
    raised wherever a load happens to be, no ``except Exception`` on the way takes it for a failure."""


class GracefulInterrupt:
    """``async with`` it in the run's task: the first SIGINT inside stops the run the way a cancel does.
    The core learns why (``core.cancel_cause``), the run's task is cancelled, and every rollout in flight
    runs its clean-up, which records it (``settle`` waits for that); the block then ends quietly with
    ``interrupted`` set, and the run says it was interrupted. A second SIGINT, a second or more later, does what
    SIGINT did before (verifiers' and the sandbox's handlers: containers removed, KeyboardInterrupt at once).

    Without it, verifiers' handler raises KeyboardInterrupt wherever the loop happens to be, and the
    summary could be written before the rollouts it should count were recorded.

    ``signum`` SIGTERM: the same for a termination (``air replay``: instead of verifiers' ``exit(143)``
    raised wherever the loop is)."""

    def __init__(self, core: Any, signum: int = signal.SIGINT) -> None:
        self.core = core  # the env's MLGymCore, or None (an env without one)
        self.signum = signum
        self.interrupted = False
        self._first_at = 0.0
        self._inside = False
        self._previous: Any = None

    async def __aenter__(self) -> GracefulInterrupt:
        if threading.current_thread() is not threading.main_thread():
            return self  # only the main thread gets signals: Ctrl-C keeps its old way
        loop, task = asyncio.get_running_loop(), asyncio.current_task()
        self._previous, self._inside = signal.getsignal(self.signum), True

        def cancel_the_run() -> None:  # in the loop: after leaving, a late one must not cancel what follows
            if self._inside and task is not None:
                task.cancel()

        def on_sigint(signum: int, frame: Any) -> None:
            if self.interrupted:
                if time.monotonic() - self._first_at < SAME_KEYPRESS_S:
                    return  # the same Ctrl-C twice: the terminal signals the group, and `uv run` forwards it
                if callable(self._previous):  # a second Ctrl-C: stop now
                    self._previous(signum, frame)
                raise KeyboardInterrupt
            self.interrupted, self._first_at = True, time.monotonic()
            if self.core is not None:
                self.core.cancel_cause = INTERRUPTED if self.signum == signal.SIGINT else TERMINATED
            loop.call_soon_threadsafe(cancel_the_run)

        signal.signal(self.signum, on_sigint)
        return self

    async def settle(self) -> None:
        """After a Ctrl-C, before the summary: take a cancel still on its way here, then wait for every task
        being cancelled (the rollouts: gather gives up on its children at the first one cancelled, and the
        others are still recording themselves), so the summary counts them."""
        if not self.interrupted:
            return
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)
        me = asyncio.current_task()
        stopping = [t for t in asyncio.all_tasks() if t is not me and not t.done() and t.cancelling()]
        if stopping:
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait(stopping, timeout=RECORDING_WAIT_S)

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        self._inside = False
        if self._previous is not None:
            signal.signal(self.signum, self._previous)
        if not self.interrupted or (kind is not None and not issubclass(kind, asyncio.CancelledError)):
            return False
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.sleep(0)  # a cancel requested after the block's last await lands here, not later
        return True  # the cancellation was ours: the run goes on, its summary written


@dataclass
class Census:
    """The rollouts a run's trajectory folder holds: finished ones per step, and the cancelled ones."""

    finished: Counter[int | None] = field(default_factory=Counter)
    cancelled: int = 0
    unreadable: int = 0

    def unfinished_step(self, steps_run: int) -> dict[str, int] | None:
        """The step the run was in when it stopped, if it recorded anything: its finished and cancelled rollouts."""
        after = sum(n for step, n in self.finished.items() if step is not None and step > steps_run)
        if not after and not self.cancelled:
            return None
        return {"step": steps_run + 1, "finished": after, "cancelled": self.cancelled}

    def as_summary(self) -> dict[str, int]:
        return {
            "finished": sum(self.finished.values()),
            "cancelled": self.cancelled,
            "unreadable": self.unreadable,
        }


def census(trajectory_dir: Path) -> Census:
    found = Census()
    for path in sorted(trajectory_dir.rglob("*.json")) if trajectory_dir.is_dir() else []:
        try:
            record = json.loads(path.read_text())
            status, step = record["exit_status"], record.get("step")
        except (OSError, ValueError, KeyError, TypeError):
            found.unreadable += 1
            continue
        if status == "cancelled":
            found.cancelled += 1
        else:
            found.finished[step if isinstance(step, int) else None] += 1
    return found


def holds_a_finished_rollout(trajectory_dir: Path) -> bool:
    """Whether a finished (not cancelled) rollout is recorded: a run that has none recorded nothing true."""
    for path in trajectory_dir.rglob("*.json") if trajectory_dir.is_dir() else []:
        try:
            if json.loads(path.read_text()).get("exit_status") != "cancelled":
                return True
        except (OSError, ValueError, AttributeError):
            return True  # not ours to judge: keep the folder rather than lose a file
    return False


def write_json_atomically(path: Path, data: dict[str, Any]) -> None:
    """``data`` as indented JSON, written whole or not at all (``trajectories.write_atomically``)."""
    write_atomically(path, (json.dumps(data, indent=2, allow_nan=False) + "\n").encode())
