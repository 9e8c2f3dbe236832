"""One console line per orchestrator step of a `uv run rl` run: its reward, how many of its traces could train.

prime-rl's orchestrator writes its step summaries to a log file among many other lines (c87c19b:
``OUT/logs/orchestrator.stdout``; today's: ``OUT/<run>/logs/attempt_<n>/orchestrator.log``). A thread follows
the run's newest one and prints ``rl: step N | reward R | trainable a/b | T`` for each step, so the one figure a
user watches is never buried. A step whose traces all tied (nothing trainable) says so: the loss is 0 then.
"""

from __future__ import annotations

import re
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

LOG_PATTERNS = ("logs/orchestrator.stdout", "*/logs/attempt_*/orchestrator.log")
_STEP = re.compile(
    r"SUCCESS Step (?P<step>\d+) \|\s*(?:Time: )?(?P<time>[^|]*?)\s*\|\s*Reward:? (?P<reward>-?[\d.]+(?:e[-+]?\d+)?)"
    r"(?:.*?Trainable (?P<trainable>\d+)/(?P<traces>\d+))?"
)
_COLOUR = re.compile(r"\x1b\[[0-9;]*m")


@dataclass(frozen=True)
class StepReport:
    step: int
    reward: float
    took: str
    trainable: int | None = None
    traces: int | None = None

    def line(self) -> str:
        parts = [f"rl: step {self.step}", f"reward {self.reward:+.4f}"]
        if self.trainable is not None:
            tied = " (all tied: nothing to learn from this step)" if self.trainable == 0 else ""
            parts.append(f"trainable {self.trainable}/{self.traces}{tied}")
        return " | ".join([*parts, self.took] if self.took else parts)


def step_report(line: str) -> StepReport | None:
    """The orchestrator's step summary in ``line`` (either pin's wording), or None."""
    found = _STEP.search(_COLOUR.sub("", line))
    if found is None:
        return None
    trainable = found["trainable"]
    return StepReport(
        step=int(found["step"]),
        reward=float(found["reward"]),
        took=found["time"].strip(),
        trainable=int(trainable) if trainable is not None else None,
        traces=int(found["traces"]) if found["traces"] is not None else None,
    )


def orchestrator_log(output: Path, since: float) -> Path | None:
    """The run's orchestrator log: the newest under ``output`` written since ``since``."""
    found = []
    for pattern in LOG_PATTERNS:
        for path in output.glob(pattern):
            try:
                mtime = path.stat().st_mtime
            except OSError:
                continue
            if mtime >= since:
                found.append((mtime, path))
    return max(found)[1] if found else None


class StepLines:
    """Follows the run's orchestrator log in a daemon thread and prints each step's line once."""

    def __init__(self, output: Path, since: float, out: TextIO = sys.stderr, interval_s: float = 2.0) -> None:
        self.output, self.since, self.out, self.interval_s = output, since, out, interval_s
        self.printed: set[int] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="rl-step-lines", daemon=True)
        self._log: Path | None = None
        self._offset = 0

    def __enter__(self) -> StepLines:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.poll()  # the last step's line, written just before the run ended

    def _follow(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.poll()

    def poll(self) -> None:
        log = orchestrator_log(self.output, self.since)
        if log is None:
            return
        if log != self._log:  # a new attempt's log: read it from its start
            self._log, self._offset = log, 0
        try:
            with open(log, "rb") as file:
                file.seek(self._offset)
                chunk = file.read()
        except OSError:
            return
        complete = chunk.rfind(b"\n") + 1  # a line still being written is read next time
        self._offset += complete
        for raw in chunk[:complete].decode(errors="replace").splitlines():
            report = step_report(raw)
            if report is not None and report.step not in self.printed:
                self.printed.add(report.step)
                print(report.line(), file=self.out, flush=True)
