"""The rehearsal's report as a table (rich) and as one JSON line."""

from __future__ import annotations

import json

from rich.console import Console
from rich.table import Table

from air.rehearsal.report import RehearsalReport

HEADLINE = (
    ("steps_completed", "steps completed"),
    ("rollouts", "rollouts"),
    ("masked", "masked rollouts (errored: nothing trained)"),
    ("samples", "samples handed to the trainer"),
    ("samples_per_rollout", "samples per rollout"),
    ("reward_mean", "reward, mean over rollouts"),
    ("advantage_nonzero_share", "samples with a non-zero advantage"),
    ("zero_advantage_groups", "groups with zero advantage (teach nothing)"),
    ("advantages_match_rewards", "advantage = reward - group mean"),
    ("loss_mask_ok", "loss mask: model tokens only"),
    ("loss_tokens", "tokens under the loss mask"),
    ("weight_updates", "weight updates the server received"),
    ("dispatched", "episodes the env ran"),
    ("cancelled", "of them cancelled by the orchestrator"),
    ("cancelled_share", "cancelled share"),
    ("seconds_per_step", "seconds per step (first rollout to last batch)"),
    ("startup_s", "seconds of start-up (processes launched to first rollout)"),
    ("wall_s", "seconds in all"),
)


def show(report: RehearsalReport, console: Console) -> None:
    table = Table(title=f"Rehearsal of {report.config} ({report.trajectory_strategy})", show_header=False)
    table.add_column("figure")
    table.add_column("value", justify="right")
    for key, label in HEADLINE:
        table.add_row(label, _fmt(getattr(report, key)))
    if report.branches_per_rollout is not None:
        table.add_row("branches per rollout (1: every turn extends the last)", _fmt(report.branches_per_rollout))
    for cause, count in report.branch_points.items():
        table.add_row(f"branch points: {cause}", _fmt(count))
    for key, value in report.env_metrics.items():
        table.add_row(f"env {key}", _fmt(value))
    console.print(table)
    for warning in report.warnings():
        console.print(f"[yellow]warning:[/yellow] {warning}")
    for problem in report.problems():
        console.print(f"[red]problem:[/red] {problem}")
    if report.dropped:
        console.print(f"Not rehearsed (need a network or a trainer): {', '.join(report.dropped)}")
    console.print(f"Batches, trajectories and logs: {report.output_dir}")


def json_line(report: RehearsalReport) -> str:
    return json.dumps(report.as_dict(), sort_keys=True)


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
