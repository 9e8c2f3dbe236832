"""Plain progress lines for output that is no terminal (a log file, a pipe).

There rich's bar draws nothing until the run ends, and a step of a loaded host takes minutes: the log
would say nothing between two ``step N`` lines. Instead a line at each quarter of a step's rollouts, and
one whenever ``every`` seconds passed with no line (rollouts of a step run together and tend to end
together, so the count alone can stay silent), each with the step and its rollouts done so far.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class ProgressLines:
    """Counts a step's finished rollouts and says how far it got through ``print_line``. Rollouts end on
    the run's event loop; the timed line comes from a thread of its own (started by :meth:`start`)."""

    def __init__(
        self,
        print_line: Callable[[str], None],
        steps: int,
        batch_size: int,
        every: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._print = print_line
        self._steps, self._batch = steps, batch_size
        self._quarter = max(1, batch_size // 4)
        self._every, self._clock = every, clock
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._step, self._done = 1, 0
        self._step_started = self._last_line = clock()

    def start(self, heartbeat: bool = True) -> None:
        """Step 1 starts now; with ``heartbeat``, the timed lines too."""
        with self._lock:
            self._step, self._done = 1, 0
            self._step_started = self._last_line = self._clock()
        if heartbeat and self._thread is None:
            self._thread = threading.Thread(target=self._beat, name="air-progress-lines", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def rollout_done(self) -> None:
        with self._lock:
            self._done += 1
            # The step's last rollout says nothing: its `step N` line follows at once.
            line = self._line() if self._done < self._batch and self._done % self._quarter == 0 else None
        if line:
            self._print(line)

    def step_done(self, step: int) -> None:
        with self._lock:
            self._step, self._done = step + 1, 0
            self._step_started = self._last_line = self._clock()

    def tick(self) -> None:
        """The timed line, when ``every`` seconds passed since the last line (or the step's start)."""
        with self._lock:
            due = self._step <= self._steps and self._clock() - self._last_line >= self._every
            line = self._line() if due else None
        if line:
            self._print(line)

    def _line(self) -> str:
        now = self._clock()
        self._last_line = now
        return (
            f"step {self._step}/{self._steps}: {self._done} of {self._batch} rollouts done "
            f"after {now - self._step_started:.1f} s"
        )

    def _beat(self) -> None:
        while not self._stopped.wait(min(self._every, 1.0)):
            self.tick()
