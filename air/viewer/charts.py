"""Altair charts for the viewer, built from rollout_stats' tables (no Streamlit here)."""

from __future__ import annotations

import altair as alt
import pandas as pd

HEIGHT = 220
_STEP_AXIS = alt.X("step:Q", title="training step", axis=alt.Axis(format="d", tickMinStep=1))


# The chart's width fits its column, its height grows with the legend. Streamlit's default ("fit" both ways)
# squeezes the whole chart into HEIGHT and cuts off whatever legend rows do not fit: the sixth run.
GROWS_DOWN = alt.AutoSizeParams(type="fit-x", contains="padding")


def _by_run(table: pd.DataFrame) -> dict[str, alt.Color]:
    """One colour per run when the table holds several (each its own curve), none for one run. The legend
    sits under the plot, one run a row, each name whole (run folders share long prefixes) and none dropped
    (vega keeps 30 entries unless told)."""
    runs = table["run"].nunique()
    if runs <= 1:
        return {}
    legend = alt.Legend(orient="bottom", direction="vertical", labelLimit=0, symbolLimit=runs)
    return {"color": alt.Color("run:N", title="run", legend=legend)}


def reward_curve(table: pd.DataFrame) -> alt.LayerChart:
    """Mean reward per training step: the learning curve, one per run."""
    base = alt.Chart(table).encode(
        x=_STEP_AXIS,
        y=alt.Y("reward:Q", title="mean reward"),
        tooltip=["run", "step", alt.Tooltip("reward:Q", format=".4f"), "rollouts"],
        **_by_run(table),
    )
    chart = base.mark_line() + base.mark_circle(size=28)
    return chart.properties(title="Reward per step", height=HEIGHT, autosize=GROWS_DOWN)


def score_curves(table: pd.DataFrame) -> alt.FacetChart:
    """Mean final score per step, one panel per task (their scales differ), baseline dashed."""
    line = (
        alt.Chart()
        .mark_line(point=True)
        .encode(
            x=_STEP_AXIS,
            y=alt.Y("final_score:Q", title="final score", scale=alt.Scale(zero=False)),
            tooltip=[
                "run",
                "task",
                "step",
                alt.Tooltip("final_score:Q", format=".4f"),
                alt.Tooltip("best_score:Q", format=".4f"),
                alt.Tooltip("baseline:Q", format=".4f"),
                "rollouts",
            ],
            **_by_run(table),
        )
    )
    baseline = alt.Chart().mark_rule(strokeDash=[4, 3], color="gray").encode(y="mean(baseline):Q")
    return (
        alt.layer(line, baseline, data=table)
        .properties(width=260, height=160)
        .facet(facet=alt.Facet("task:N", title=None), columns=3)
        .resolve_scale(y="independent")
        .properties(title="Final score per step (dashed: baseline)")
    )


def improvement_bars(table: pd.DataFrame) -> alt.Chart:
    """Per task: mean final score minus baseline (positive is better), one bar per task and agent.
    With many agents (MLGym's model comparisons), a task x agent grid coloured by how often the
    baseline was beaten (the raw improvements of different tasks are not on one scale)."""
    tooltip = [
        "task",
        "agent",
        alt.Tooltip("improvement:Q", format="+.4f", title="mean improvement"),
        alt.Tooltip("beat_baseline:Q", format=".0%", title="beat baseline"),
        "rollouts",
    ]
    agents = table["agent"].nunique()
    if agents > 3:
        return (
            alt.Chart(table)
            .mark_rect()
            .encode(
                x=alt.X("agent:N", title=None, axis=alt.Axis(labelAngle=-35, labelLimit=150, labelOverlap=False)),
                y=alt.Y("task:N", title=None, axis=alt.Axis(labelLimit=200)),
                color=alt.Color(
                    "beat_baseline:Q", title="beat baseline", scale=alt.Scale(scheme="redyellowgreen", domain=[0, 1])
                ),
                tooltip=tooltip,
            )
            .properties(title="Share of rollouts beating the baseline, per task and model", height=alt.Step(22))
        )
    several = agents > 1
    table = table.assign(row=table["task"] + (" · " + table["agent"] if several else ""))
    return (
        alt.Chart(table)
        .mark_bar()
        .encode(
            y=alt.Y("row:N", title=None, sort=None, axis=alt.Axis(labelLimit=320)),
            x=alt.X("improvement:Q", title="mean final score - baseline (+ = better)"),
            color=alt.Color("agent:N", title="model / policy", legend=alt.Legend(orient="bottom") if several else None),
            tooltip=tooltip,
        )
        .properties(title="Improvement over baseline per task", height=alt.Step(26))
    )


def per_x_chart(table: pd.DataFrame, x: str, y: str, title: str, y_title: str, percent: bool = False) -> alt.Chart:
    """A line over training steps, or bars per agent when there are no steps."""
    fmt = ".0%" if percent else ".2f"
    tooltip = [x, alt.Tooltip(f"{y}:Q", format=fmt), *[c for c in table.columns if c not in (x, y)]]
    if x == "step":
        y_axis = alt.Y(f"{y}:Q", title=y_title, axis=alt.Axis(format=fmt))
        base = alt.Chart(table).encode(x=_STEP_AXIS, y=y_axis, tooltip=tooltip)
        chart = base.mark_line() + base.mark_circle(size=24)
        return chart.properties(title=title, height=HEIGHT)
    # one horizontal bar per agent: long model names stay readable
    x_axis = alt.X(f"{y}:Q", title=y_title, axis=alt.Axis(format=fmt))
    y_axis = alt.Y(f"{x}:N", title=None, axis=alt.Axis(labelLimit=160, labelOverlap=False))
    chart = alt.Chart(table).mark_bar().encode(y=y_axis, x=x_axis, tooltip=tooltip)
    return chart.properties(title=title, height=alt.Step(18))


def evaluation_chart(points: pd.DataFrame, baseline: float | None) -> alt.Chart:
    """A rollout's score after each evaluation, at the turn it happened (baseline dashed)."""
    scored = points[points["score"].notna()]
    base = alt.Chart(scored).encode(
        x=alt.X("turn:Q", title="step (turn)", axis=alt.Axis(format="d", tickMinStep=1)),
        y=alt.Y("score:Q", title="score", scale=alt.Scale(zero=False)),
        tooltip=["turn", "kind", alt.Tooltip("score:Q", format=".4f")],
    )
    chart = base.mark_line() + base.mark_circle(size=60).encode(color=alt.Color("kind:N", title="evaluation"))
    if baseline is not None:
        rule = alt.Chart(pd.DataFrame({"baseline": [baseline]})).mark_rule(strokeDash=[4, 3], color="gray")
        chart = chart + rule.encode(y="baseline:Q")
    return chart.properties(title="Score after each evaluation (dashed: baseline)", height=200)


def learning_panels(table: pd.DataFrame, order: list[str]) -> alt.FacetChart:
    """A prime-rl run's learning curve (learning.learning_table): one panel per series (reward, valid-command
    share, task score, ...), each on its own scale, one line per run."""
    base = alt.Chart().encode(
        x=_STEP_AXIS,
        y=alt.Y("value:Q", title=None, scale=alt.Scale(zero=False)),
        tooltip=["run", "step", "series", alt.Tooltip("value:Q", format=".4f"), "source"],
        **_by_run(table),
    )
    return (
        alt.layer(base.mark_line(), base.mark_circle(size=28), data=table)
        .properties(width=300, height=170)
        .facet(facet=alt.Facet("series:N", title=None, sort=order), columns=3)
        .resolve_scale(y="independent")
        .properties(title="Learning curve per step (prime-rl run)")
    )
