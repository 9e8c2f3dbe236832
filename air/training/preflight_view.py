"""The table `air check` prints: one row per finding, the fix beside each failure."""

from __future__ import annotations

from collections import Counter

from rich.console import Console
from rich.table import Table

from air.training.preflight_rows import CheckRow

STYLES = {"pass": "green", "warn": "yellow", "fail": "bold red", "n/a": "dim"}


def render_rows(console: Console, rows: list[CheckRow]) -> None:
    table = Table(title="air check", show_lines=False)
    table.add_column("check", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("detail", overflow="fold")
    table.add_column("fix", overflow="fold")
    for row in rows:
        style = STYLES[row.status]
        table.add_row(row.check, f"[{style}]{row.status}[/{style}]", row.detail, row.fix)
    console.print(table)
    counts = Counter(r.status for r in rows)
    summary = ", ".join(f"{counts[s]} {s}" for s in ("pass", "warn", "fail", "n/a") if counts[s])
    verdict = "[bold red]not ready[/bold red]" if counts["fail"] else "[green]ready[/green]"
    console.print(f"{verdict}: {summary}")
