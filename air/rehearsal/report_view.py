"""The rehearsal's report as a table (rich) and as one JSON line."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console
from rich.table import Table

from air.rehearsal.report import RehearsalReport
from air.rehearsal.trainer_report import TrainerRun

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
    if report.engine:
        console.print(f"Served by {report.engine}")
    for server in report.env_servers:
        if server.get("env_nodes"):
            show_env_nodes(server["source"], server["env_nodes"], console)
    if report.trainer_run is not None:
        show_trainer(report.trainer_run, console)
    for warning in report.warnings():
        console.print(f"[yellow]warning:[/yellow] {warning}")
    for problem in report.problems():
        console.print(f"[red]problem:[/red] {problem}")
    if report.dropped:
        console.print(f"Not rehearsed (need a network or a trainer): {', '.join(report.dropped)}")
    console.print(f"Batches, trajectories and logs: {report.output_dir}")


def show_env_nodes(source: str, nodes: dict[str, dict], console: Console) -> None:
    """Each env node of a spread source as the spreader last saw it (air/fleet)."""
    table = Table(title=f"Env nodes of source {source}")
    for column in ("node", "state", "running", "done", "failed", "losses", "warm containers"):
        table.add_column(column, justify="left" if column in ("node", "state") else "right")
    for name, node in nodes.items():
        state = node["state"] + (f" ({node['reason']})" if node.get("reason") else "")
        counts = (node["running"], node["done"], node["failed"], node["losses"], node.get("warm_containers"))
        table.add_row(name, state, *("-" if value is None else str(value) for value in counts))
    console.print(table)


def show_trainer(run: TrainerRun, console: Console) -> None:
    table = Table(title=f"prime-rl's trainer ({run.device})")
    for column in STEP_COLUMNS:
        table.add_column(column, justify="right")
    for step in run.steps:
        changed = f"{step.changed_tensors}/{step.trainable_tensors}"
        memory = "-" if step.peak_memory_gib is None else f"{step.peak_memory_gib:.2f}"
        table.add_row(
            str(step.step),
            f"{step.loss:.4g}",
            f"{step.grad_norm:.3g}",
            f"{step.max_param_change:.3g}",
            changed,
            _fmt(step.params_finite),
            str(step.loss_tokens),
            str(step.samples),
            memory,
            "-" if step.train_s is None else f"{step.train_s:.1f}",
            "-" if step.step_time_s is None else f"{step.step_time_s:.1f}",
        )
    console.print(table)
    loaded = ", ".join(Path(folder).name for folder in run.broadcasts_loaded) or "none"
    console.print(f"Broadcasts the server loaded when the orchestrator asked: {loaded}")
    sample = run.fixed_sample
    if sample is not None:
        console.print(
            f"Fixed sample (step {sample.step}, {sample.tokens} trained tokens), mean logprob: "
            f"{sample.logprob_before:.6f} before, {sample.logprob_after:.6f} after {sample.broadcast}"
        )
    served = run.served_sample
    if served is not None:
        console.print(
            f"The same sample through the server, mean logprob: {served.logprob_before:.6f} as {served.model_before}, "
            f"{served.logprob_after:.6f} as {served.model_after} (the next rollouts' model)"
        )
    if run.sizing:
        console.print(f"Sized for the CPU: {run.sizing}")


STEP_COLUMNS = (
    "step",
    "loss",
    "grad norm",
    "max |Δ param|",
    "tensors changed",
    "finite",
    "loss tokens",
    "samples",
    "peak GiB",
    "train s",  # the batch loaded to the update done
    "step s",  # prime-rl's time/step: waiting for the batch included
)


def json_line(report: RehearsalReport) -> str:
    return json.dumps(report.as_dict(), sort_keys=True)


def _fmt(value: object) -> str:
    if isinstance(value, bool):
        return "yes" if value else "NO"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)
