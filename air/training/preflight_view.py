"""What `air check` prints: on a terminal, a table with the fix beside each failure; piped or in a CI
log, one finding per line at full width, so no key name or path is split across lines."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from air.training.preflight_rows import CheckRow

STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red", "n/a": "dim"}


def render_rows(console: Console, rows: list[CheckRow]) -> None:
    if console.is_terminal:
        console.print(_table(rows))
    else:
        for row in rows:
            console.print(finding_line(row), markup=False, highlight=False, soft_wrap=True)
    counts = Counter(r.status for r in rows)
    summary = ", ".join(f"{counts[s]} {s}" for s in ("pass", "warn", "fail", "n/a") if counts[s])
    verdict = "[bold red]not ready[/bold red]" if counts["fail"] else "[green]ready[/green]"
    console.print(f"{verdict}: {summary}", soft_wrap=True)


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
