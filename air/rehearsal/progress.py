"""A progress bar for the rehearsal's set-up and steps (rich)."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


class StepProgress:
    def __init__(self, console: Console) -> None:
        self._progress = Progress(
            TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console
        )
        self._tasks: dict[str, int] = {}

    def update(self, what: str, done: int, total: int) -> None:
        if what not in self._tasks:
            label = "orchestrator steps" if what == "steps" else what
            self._tasks[what] = self._progress.add_task(label, total=total)
        self._progress.update(self._tasks[what], completed=done, total=total)

    def __enter__(self) -> StepProgress:
        self._progress.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._progress.stop()
