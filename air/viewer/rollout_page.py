"""The viewer's rollout pages: one rollout step by step, and two side by side."""

from __future__ import annotations

import streamlit as st

from air.env.actions import split_think
from air.env.trajectories import TrajectoryRecord, Turn, TurnEvaluation
from air.viewer import charts, stats
from air.viewer.index import agent_of
from air.viewer.plain import code_block, code_span, escape_markdown, literal


def render_rollout(record: TrajectoryRecord, key: str) -> None:
    """Header, score chart, prompts, then one step at a time with previous / next / jump."""
    _header(record, key)
    if record.turns:
        _score_chart(record)
    _prompts(record)
    if not record.turns:
        st.info("This rollout has no recorded steps.")
        return
    count = len(record.turns)
    if st.session_state.get("turn_of") != key:  # a newly opened rollout starts at its first step
        st.session_state["turn_of"], st.session_state["turn"] = key, 1
    _set_turn(st.session_state.get("turn", 1), count)
    show_all = st.toggle("Show all steps", key="show_all_steps")
    if show_all:
        for turn in record.turns:
            _turn(turn, count, record)
        return
    previous, jump, following = st.columns([1, 2, 1], vertical_alignment="bottom")
    previous.button("◀ Previous step", on_click=_move, args=(-1, count), disabled=st.session_state["turn"] <= 1)
    jump.number_input("Jump to step", min_value=1, max_value=count, step=1, key="turn")
    following.button("Next step ▶", on_click=_move, args=(1, count), disabled=st.session_state["turn"] >= count)
    _turn(record.turns[st.session_state["turn"] - 1], count, record)


def render_side_by_side(left: tuple[str, TrajectoryRecord], right: tuple[str, TrajectoryRecord]) -> None:
    for column, (key, record) in zip(st.columns(2, gap="medium"), (left, right), strict=True):
        with column:
            _header(record, key, compact=True)
            if record.turns:
                _score_chart(record)
            for turn in record.turns:
                with st.expander(_turn_title(turn, len(record.turns))):
                    _turn_body(turn, record)


def _set_turn(turn: int, count: int) -> None:
    st.session_state["turn"] = min(max(1, turn), count)


def _move(delta: int, count: int) -> None:
    _set_turn(st.session_state.get("turn", 1) + delta, count)


def _header(record: TrajectoryRecord, key: str, compact: bool = False) -> None:
    st.subheader(escape_markdown(f"{record.task} · {agent_of(record)}"), anchor=False)
    where = [f"step {record.step}"] if record.step is not None else []
    where += [f"group {record.group_id}"] if record.group_id else []
    st.caption(escape_markdown(" · ".join([*where, f"exit: {record.exit_status}", f"source: {record.source}", key])))
    final = record.final_evaluation.score if record.final_evaluation else None
    baseline = record.baseline.score
    delta = None
    if final is not None and baseline is not None:
        delta = f"{(final - baseline):+.4f} vs baseline"
    columns = st.columns(3 if compact else 5)
    columns[0].metric("reward", stats.format_score(record.reward))
    columns[1].metric(
        escape_markdown(f"final {record.baseline.metric or 'score'}"),
        stats.format_score(final),
        delta=delta,
        delta_color="normal" if record.baseline.higher_is_better else "inverse",
    )
    columns[2].metric("baseline", stats.format_score(baseline))
    if not compact:
        columns[3].metric("steps", len(record.turns))
        columns[4].metric("duration", "n/a" if record.duration_s is None else f"{record.duration_s:.1f} s")
    if record.error:
        st.error("Rollout error:" + code_block(record.error))


def _score_chart(record: TrajectoryRecord) -> None:
    points = stats.evaluation_points(record)
    if points["score"].notna().any():
        st.altair_chart(charts.evaluation_chart(points, record.baseline.score), width="stretch")
    else:
        st.caption("No evaluation produced a score in this rollout.")


def _prompts(record: TrajectoryRecord) -> None:
    for title, text in (("System prompt", record.system_prompt), ("Task prompt", record.task_prompt)):
        if text:
            with st.expander(title):
                st.code(text, language=None, wrap_lines=True)


def _turn_title(turn: Turn, count: int) -> str:
    """Markdown: the step in bold, the command's first line in code (the agent's text, set apart from the
    viewer's own marks after it: a command reading "validate: score 4.99" stays visibly a command)."""
    if turn.command and turn.command.strip():
        what = code_span(turn.command.strip().splitlines()[0][:80])
    else:
        what = escape_markdown("(no command)")
    marks = []
    if turn.format_error:
        marks.append("format error")
    if turn.timed_out:
        marks.append("timed out")
    if turn.evaluation is not None:
        marks.append(_evaluation_line(turn.evaluation))
    return f"**Step {turn.index} of {count}**: {what}" + (escape_markdown(f" — {'; '.join(marks)}") if marks else "")


def _turn(turn: Turn, count: int, record: TrajectoryRecord) -> None:
    with st.container(border=True):
        st.markdown(_turn_title(turn, count))
        _turn_body(turn, record)


def _turn_body(turn: Turn, record: TrajectoryRecord) -> None:
    visible, reasoning = split_think(turn.model_text)
    if reasoning:
        with st.expander("Reasoning (folded)"):
            st.code(literal(reasoning), language=None, wrap_lines=True)
    st.caption("Model")
    st.code(literal(visible.strip() or "(empty reply)"), language="markdown", wrap_lines=True)
    if turn.format_error:
        st.warning("Format error:" + code_block(turn.format_error))
    if turn.command is not None:
        st.caption("Command")
        st.code(literal(turn.command), language="bash", wrap_lines=True)
    details = [f"exit code {turn.exit_code}" if turn.exit_code is not None else "exit code unknown"]
    details.append(f"{turn.duration_s:.2f} s")
    if turn.timed_out:
        details.append("timed out")
    if turn.executed_after_last_turn:
        details.append("run after the last turn")
    st.caption(escape_markdown("Output · " + " · ".join(details)))
    st.code(literal(turn.output or "(no output)"), language=None, wrap_lines=True, height="content")
    if turn.evaluation is not None:
        evaluation = turn.evaluation
        message = escape_markdown(_evaluation_line(evaluation))
        if record.baseline.score is not None and evaluation.score is not None:
            message += f" (baseline {record.baseline.score:.4f})"
        if evaluation.error:  # what the agent was told: it can carry the agent's own output
            message += code_block(evaluation.error)
        (st.success if evaluation.status == "ok" else st.error)(message)


def _evaluation_line(evaluation: TurnEvaluation) -> str:
    """The viewer's own words (kind, status, score), never the evaluation's error text."""
    if evaluation.status == "ok" and evaluation.score is not None:
        return f"{evaluation.kind}: score {evaluation.score:.4f}"
    return f"{evaluation.kind}: {evaluation.status}"
