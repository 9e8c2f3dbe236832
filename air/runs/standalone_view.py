"""How ``air standalone`` looks on a terminal: a progress bar over rollouts, a line per step, and a
closing table. Separate from ``air.runs.standalone`` so the loop stays free of presentation."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from air.runs.progress_lines import ProgressLines
from air.runs.run_folder import RUN_FILES
from air.runs.standalone_settings import StandaloneSettings
from air.sandbox.neutral import neutral
from air.serving.models.served_model import is_model_spec

CAUSE_LIMIT = 300  # masked_cause's own cut; a summary.json edited by hand is cut here


def _fmt(value: float, digits: int = 3) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{value:.{digits}f}"


class StandaloneProgress:
    def __init__(self, console: Console, settings: StandaloneSettings, folder: Path) -> None:
        self.console = console
        self.settings = settings
        self.folder = folder
        self.progress = Progress(
            TextColumn("[bold]rollouts"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
        )
        self.task_id = self.progress.add_task("", total=settings.steps * settings.batch_size)
        # Not interactive (a log file, a pipe): the bar draws nothing until the end; plain lines say how a step goes.
        self.lines = None if console.is_interactive else ProgressLines(self._plain, settings.steps, settings.batch_size)

    def __enter__(self) -> StandaloneProgress:
        return self

    def start(self) -> None:
        """The env loaded and the agent answers: say what runs where, and show the bar."""
        s = self.settings
        if s.base_url:
            who = s.base_url
        elif is_model_spec(s.policy):
            who = f"{s.policy} on this CPU (its own samples)"
        else:
            who = f"scripted policy {s.policy!r}"
        self.console.print(
            f"[bold]air standalone[/]: {s.steps} steps x {s.batch_size} rollouts "
            f"(groups of {s.rollouts_per_example}) on {', '.join(s.tasks or [])} against {who}"
        )
        self.console.print(f"run folder: {self.folder}")
        self.progress.start()
        if self.lines:
            self.lines.start()

    def __exit__(self, *exc: object) -> None:
        if self.lines:
            self.lines.stop()
        if self.progress.live.is_started:
            self.progress.stop()

    def _plain(self, line: str) -> None:
        self.console.print(line, markup=False, highlight=False)

    def rollout_done(self) -> None:
        self.progress.advance(self.task_id)
        if self.lines:
            self.lines.rollout_done()

    def step_done(self, stats: dict[str, Any]) -> None:
        if self.lines:
            self.lines.step_done(stats["step"])
        self.progress.update(self.task_id, description=f"step {stats['step']}/{self.settings.steps}")
        self.progress.console.print(
            f"step {stats['step']:>3}  reward {_fmt(stats['reward_mean'])} ± {_fmt(stats['reward_std'])}  "
            f"zero-adv groups {_fmt(stats['zero_advantage_groups'], 2)}  "
            f"validates/rollout {_fmt(stats['validates_per_rollout'], 1)}  "
            f"masked {stats['masked']}  {stats['seconds']:.1f} s"
        )

    def print_summary(self, summary: dict[str, Any]) -> None:
        table = Table(title="standalone run")
        for column in ("step", "reward mean", "reward std", "zero-adv groups", "validates/rollout", "masked", "s"):
            table.add_column(column, justify="right")
        for s in summary["steps"]:
            table.add_row(
                str(s["step"]),
                _fmt(s["reward_mean"]),
                _fmt(s["reward_std"]),
                _fmt(s["zero_advantage_groups"], 2),
                _fmt(s["validates_per_rollout"], 1),
                str(s["masked"]),
                f"{s['seconds']:.1f}",
            )
        self.console.print(table)
        folder = Path(summary["output_dir"])
        written = [f"{p.name}/" if p.is_dir() else p.name for p in sorted(folder.iterdir()) if p.name in RUN_FILES]
        self.console.print(
            f"{summary['rollouts']} rollouts in {summary['seconds']:.1f} s; outputs in {folder} ({', '.join(written)})"
        )
        print_masked(self.console, summary)


def print_interrupted(console: Console, summary: dict[str, Any]) -> None:
    """What a Ctrl-C left: how far the run got, and what its folder holds (if anything was worth keeping)."""
    folder = Path(summary["output_dir"])
    if not (folder / "summary.json").is_file():
        console.print("interrupted before any rollout ended: no run folder kept")
        return
    line = f"interrupted after {summary['steps_run']} of {summary['settings']['steps']} steps"
    unfinished = summary.get("unfinished_step")
    if unfinished:
        line += (
            f"; step {unfinished['step']}: {unfinished['finished']} rollouts finished, {unfinished['cancelled']} "
            "cut short (recorded as cancelled, no reward, in no mean or count)"
        )
    console.print(f"{line}; summary in {folder / 'summary.json'}")
    print_masked(console, summary)


def print_masked(console: Console, summary: dict[str, Any]) -> None:
    """How many rollouts were masked and why: the last lines of a run, finished or stopped."""
    if not summary.get("masked"):
        return
    console.print(f"{summary['masked']} of {summary['rollouts']} rollouts masked (left out of training):")
    for cause, count in summary.get("masked_causes", {}).items():  # a cause may quote the container or the model
        console.print(f"  {count} x {neutral(cause, limit=CAUSE_LIMIT, markup=True)}", emoji=False)
