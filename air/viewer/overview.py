"""The viewer's overview: headline numbers, the learning charts and the table of rollouts."""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import pandas as pd
import streamlit as st

from air.viewer import charts, stats

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
