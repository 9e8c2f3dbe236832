"""The viewer's overview: headline numbers, the learning charts and the table of rollouts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pandas as pd
import streamlit as st

from air.viewer import charts, learning, rl_run, stats
from air.viewer.index import TrajectoryIndex
from air.viewer.plain import escape_markdown

TABLE_COLUMNS = {
    "run": st.column_config.TextColumn("run", help="the run folder the rollout was recorded in"),
    "task": st.column_config.TextColumn("task"),
    "agent": st.column_config.TextColumn("model / policy"),
    "step": st.column_config.NumberColumn("step", format="%d"),
    "exit_status": st.column_config.TextColumn("exit"),
    "reward": st.column_config.NumberColumn("reward", format="%.4f"),
    "final_score": st.column_config.NumberColumn("final score", format="%.4f"),
    "baseline_score": st.column_config.NumberColumn("baseline", format="%.4f"),
    "improvement": st.column_config.NumberColumn("vs baseline", format="%+.4f", help="final - baseline; + = better"),
    "best_score": st.column_config.NumberColumn("best score", format="%.4f"),
    "turns": st.column_config.NumberColumn("turns"),
    "validates": st.column_config.NumberColumn("validates"),
    "format_errors": st.column_config.NumberColumn("format errors"),
    "suspicious_evaluations": st.column_config.NumberColumn(
        "suspicious", help="evaluations with a forged-looking score"
    ),
    "duration_s": st.column_config.NumberColumn("duration (s)", format="%.1f"),
    "started_at": st.column_config.DatetimeColumn("started", format="YYYY-MM-DD HH:mm:ss"),
    "key": st.column_config.TextColumn("file"),
}


def render_overview(
    frame: pd.DataFrame, shown: pd.DataFrame, problems: int, on_pick: Callable[[list[str]], None]
) -> None:
    """``frame``: every rollout; ``shown``: after filters and sorting. Selecting a table row calls
    ``on_pick(keys)`` (keys in table order), which reads the selection from the session state."""
    _headline(stats.ended(frame), stats.ended(shown), problems)
    cut = int((shown["exit_status"] == stats.CANCELLED).sum())
    if cut:
        st.caption(
            f"{cut:,} rollouts were cut short (exit `cancelled`: the run was stopped in their step). They have "
            "no reward and are left out of every number and chart; their steps have no point on the curves."
        )
    if shown.empty:
        st.info("No rollout matches the filters.")
        return
    charted = stats.whole_steps(shown)
    if charted.empty:
        st.info("Every rollout shown was cut short: nothing to chart.")
    else:
        _charts(charted)
    st.subheader("Rollouts")
    st.caption("Select a row to open the rollout.")
    st.dataframe(
        shown[list(TABLE_COLUMNS)],
        column_config=TABLE_COLUMNS,
        hide_index=True,
        on_select=partial(on_pick, list(shown.index)),
        selection_mode="single-row",
        key="overview_table",
        height=420,
    )


def _headline(frame: pd.DataFrame, shown: pd.DataFrame, problems: int) -> None:
    scored = shown["improvement"].dropna()
    columns = st.columns(6)
    columns[0].metric(f"rollouts shown (of {len(frame):,})", f"{len(shown):,}")
    columns[1].metric("runs · tasks", f"{shown['run'].nunique()} · {shown['task'].nunique()}")
    steps = shown["step"].dropna()
    columns[2].metric("training steps", f"{steps.min()}-{steps.max()}" if len(steps) else "none")
    columns[3].metric("mean reward", stats.format_score(shown["reward"].mean()))
    columns[4].metric("beat the baseline", f"{(scored > 0).mean():.0%}" if len(scored) else "n/a")
    columns[5].metric("unreadable files", problems)


def _charts(shown: pd.DataFrame) -> None:
    if stats.has_steps(shown):
        left, right = st.columns(2)
        left.altair_chart(charts.reward_curve(stats.reward_per_step(shown)), width="stretch")
        right.altair_chart(charts.improvement_bars(stats.improvement_by_task(shown)), width="stretch")
        curves = stats.learning_curve(shown)
        if curves["final_score"].notna().any():
            st.altair_chart(charts.score_curves(curves))
    else:
        st.caption("These rollouts record no training step (MLGym runs, for one): charts are per model or policy.")
        improvement = stats.improvement_by_task(shown)
        if not improvement.empty:
            st.altair_chart(charts.improvement_bars(improvement), width="stretch")
    x = stats.per_step_or_agent(shown)
    left, middle, right = st.columns(3)
    validates = stats.validates_per_rollout(shown)
    left.altair_chart(
        charts.per_x_chart(validates, x, "validates", "Validates per rollout", "mean validates"), width="stretch"
    )
    middle.altair_chart(
        charts.per_x_chart(stats.format_error_rate(shown), x, "rate", "Format-error rate", "errors per turn", True),
        width="stretch",
    )
    zero = stats.zero_advantage_share(shown)
    if zero.empty:
        right.caption("Zero-advantage groups: no rollout here records its group and training step.")
    else:
        title = "Zero-advantage groups (all rewards equal)"
        right.altair_chart(charts.per_x_chart(zero, "step", "share", title, "share of groups", True), width="stretch")


@st.cache_data(max_entries=64, show_spinner=False)
def _step_metrics(path: str, signature: tuple[int, int]) -> learning.StepMetrics:
    """A metrics.jsonl read once per version of it (``signature``: its modification time and size)."""
    return learning.read_step_metrics(Path(path))


def _signature(path: Path) -> tuple[int, int]:
    try:
        stat = path.stat()
    except OSError:
        return 0, -1
    return stat.st_mtime_ns, stat.st_size


def _run_curve(run: Path, index: TrajectoryIndex) -> list[learning.StepRow]:
    """The run's steps: its metrics.jsonl, and the indexed trajectories in its folder or its env's."""
    path = run / rl_run.METRICS_FILE
    signature = _signature(path)

    def build() -> list[learning.StepRow]:
        folders = [str(f.resolve()) for f in rl_run.trajectory_folders(run)]
        mine = [r for r in index.rollouts if any(r.path.startswith(f + "/") for f in folders)]
        return learning.learning_curve(run, mine, metrics=_step_metrics(str(path), signature))

    return index.memo(("learning", str(run), signature), build)


def render_rl_runs(directory: Path, runs: list[Path], index: TrajectoryIndex) -> None:
    """The learning curve of each prime-rl run folder at or under ``directory``, from its metrics.jsonl
    (else its trajectories' steps), and the numbers behind it."""
    curves = {rl_run.run_label(run, directory): _run_curve(run, index) for run in runs}
    table = learning.learning_table(curves)
    names = ", ".join(curves)
    if table.empty:
        st.info(escape_markdown(f"prime-rl run {names}: no step recorded yet (metrics.jsonl, trajectories)."))
        return
    st.altair_chart(charts.learning_panels(table, learning.series_order(table)))
    rows = [
        {"run": run, **{k: v for k, v in dataclasses.asdict(row).items() if k != "task_scores"}}
        | {f"task score: {task}": score for task, score in row.task_scores.items()}
        for run, steps in curves.items()
        for row in steps
    ]
    with st.expander(escape_markdown(f"Per-step numbers of {names}")):
        st.dataframe(pd.DataFrame(rows), hide_index=True, width="stretch")
