"""What `air check` prints: on a terminal, a table with the fix beside each failure; piped or in a CI
log, one finding per line at full width, so no key name or path is split across lines."""

from __future__ import annotations

import sys
import time
from collections import Counter

from rich.console import Console
from rich.table import Table

from air.launch.preflight_rows import CheckRow

STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red", "n/a": "dim"}


def render_rows(console: Console, rows: list[CheckRow], seconds: float | None = None) -> None:
    """The rows, then the verdict with how long the checks took (``seconds``: measured, never estimated)."""
    if console.is_terminal:
        console.print(_table(rows))
    else:
        for row in rows:
            console.print(finding_line(row), markup=False, highlight=False, soft_wrap=True)
    counts = Counter(r.status for r in rows)
    summary = ", ".join(f"{counts[s]} {s}" for s in ("pass", "warn", "fail", "n/a") if counts[s])
    verdict = "[bold red]not ready[/bold red]" if counts["fail"] else "[green]ready[/green]"
    took = f" (checked in {seconds:.1f} s)" if seconds is not None else ""
    console.print(f"{verdict}: {summary}{took}", soft_wrap=True)


class CheckStatus:
    """What shows while the checks run: which one, of how many, and the time so far. On a terminal, the
    spinner's line (and progress lines above it); elsewhere (a pipe, a file, a CI log) a line on stderr as each
    check starts, so a slow check is never a silence and stdout keeps only the findings."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.started = time.monotonic()
        self.seconds: float | None = None

    def __enter__(self) -> CheckStatus:
        self._status = self.console.status("checking ...")
        self._status.__enter__()
        return self

    def check_started(self, name: str, number: int, of: int) -> None:
        line = f"checking {name} ({number}/{of}, {time.monotonic() - self.started:.0f} s so far)"
        self._status.update(line)
        if not self.console.is_terminal:
            self.say(line)

    def say(self, line: str) -> None:
        """A progress line as it happens: above the spinner on a terminal, else on stderr at once."""
        if self.console.is_terminal:
            self.console.print(line, style="dim", markup=False, highlight=False, soft_wrap=True)
        else:
            print(line, file=sys.stderr, flush=True)

    def __exit__(self, *exc: object) -> None:
        self.seconds = time.monotonic() - self.started
        self._status.__exit__(*exc)


def finding_line(row: CheckRow) -> str:
    """``fail  config: <detail>  (fix: <fix>)``: the status first, so `grep ^fail` finds the failures."""
    line = f"{row.status:<4}  {row.check}: {row.detail}"
    return f"{line}  (fix: {row.fix})" if row.fix else line


def _table(rows: list[CheckRow]) -> Table:
    table = Table(title="air check", show_lines=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    table.add_column("fix", overflow="fold")
    for row in rows:
        style = STYLES[row.status]
        table.add_row(row.check, f"[{style}]{row.status}[/{style}]", row.detail, row.fix)
    return table
