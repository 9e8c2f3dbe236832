"""What "the engine is making progress" means, for the bounds of :mod:`air.serving.runtime.generation_engine`.

A model on a busy CPU is slow by nature: a forward pass can take minutes there and is still work. So a
request is bounded by progress, not by a wall clock: the engine progresses while forward passes end or
its worker thread uses CPU (read from the thread's own CPU clock). A request fails only when neither
happened for its bound (a hung or dead worker), and closing the engine waits for the pass in flight while
it progresses: a thread still inside torch when the interpreter exits aborts the process ("terminate
called without an active exception", exit 134).
"""

from __future__ import annotations

import threading
import time


class EngineStalled(RuntimeError):
    """The engine made no progress on a request for its bound."""


def thread_cpu_seconds(thread: threading.Thread) -> float | None:
    """CPU seconds ``thread`` has used (its own clock); None where the platform has none or it ended."""
    try:
        return time.clock_gettime(time.pthread_getcpuclockid(thread.ident))
    except (AttributeError, OSError, TypeError, OverflowError):
        return None


class Progress:
    """When the worker last progressed (``time.monotonic()``): a pass ended, or it was seen using CPU."""

    def __init__(self, thread: threading.Thread) -> None:
        self.thread = thread
        self._pass_ended = time.monotonic()
        self._cpu_seen = (self._pass_ended, thread_cpu_seconds(thread))

    def pass_ended(self) -> None:
        self._pass_ended = time.monotonic()

    def last(self) -> float:
        """The last moment of progress, its CPU clock read now (several threads may ask: any answer is a
        moment the worker was seen progressing)."""
        now = time.monotonic()
        seen_at, cpu = self._cpu_seen
        used = thread_cpu_seconds(self.thread)
        if used is not None and (cpu is None or used > cpu):
            self._cpu_seen = seen_at, cpu = now, used
        return max(self._pass_ended, seen_at)

    def wait_for_end(self, stuck_s: float, poll_s: float) -> bool:
        """Join the worker while it progresses; False when it made none for ``stuck_s`` (left behind)."""
        while self.thread.is_alive():
            self.thread.join(timeout=poll_s)
            if time.monotonic() - self.last() > stuck_s and self.thread.is_alive():
                return False
        return True


__all__ = ["EngineStalled", "Progress", "thread_cpu_seconds"]
