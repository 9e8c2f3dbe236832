"""What `air clean` prints: the plan (what would be stopped) and, after --yes, what happened."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from air.launch.cleanup import CleanPlan, CleanReport


def render_plan(console: Console, plan: CleanPlan) -> None:
    if plan.docker_error:
        console.print(f"[yellow]containers not checked:[/yellow] {plan.docker_error}")
    for path, error in plan.unreadable_records:
        console.print(f"[yellow]unreadable process record[/yellow] {path}: {error} (left alone)")
    if plan.containers:
        table = Table(title="sandbox containers whose owner is gone")
        for column in ("container", "status", "run", "owner pid"):
            table.add_column(column)
        for item in plan.containers:
            owner = f"{item.owner_pid} ({'alive' if item.owner_alive else 'gone'})" if item.owner_pid else "?"
            table.add_row(f"{item.id[:12]} {item.name}", item.status, item.run_id, owner)
        console.print(table)
    if plan.processes:
        table = Table(title="processes of recorded runs")
        for column in ("pid", "run", "command", "launcher"):
            table.add_column(column, overflow="fold")
        for item in plan.processes:
            table.add_row(str(item.pid), item.run_id, item.command, "running" if item.root_alive else "exited")
        console.print(table)
    for line in plan.skipped_running:
        console.print(f"[dim]left alone (still running; --include-running stops it):[/dim] {line}")
    if plan.empty:
        console.print("[green]Nothing left behind:[/green] no air containers of dead processes, no recorded leftovers.")


def render_report(console: Console, report: CleanReport) -> None:
    for item, outcome in report.containers:
        style = "red" if outcome.startswith("failed") else "green"
        console.print(f"container {item.id[:12]} ({item.name}): [{style}]{outcome}[/{style}]")
    for outcome in report.processes:
        style = "red" if outcome.outcome.startswith("failed") else "green"
        console.print(f"pid {outcome.pid} ({outcome.command}): [{style}]{outcome.outcome}[/{style}]")
    if report.forgotten_records:
        console.print(f"[dim]records of finished runs removed: {', '.join(report.forgotten_records)}[/dim]")
