"""The trajectory viewer (Streamlit): training runs and MLGym runs, learning at a glance.

    uv run air view DIR
    uv run streamlit run air/visualize.py -- --trajectory_dir DIR   (the script: air/visualize.py)

Reads our trajectory JSON files at any depth and MLGym run folders (``.traj`` + ``results.json``);
a file that cannot be read is listed under Problems and skipped. The folder's index is kept per
server process and re-read incrementally on Reload; rollout bodies are read when opened.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

from air.env.trajectories import TrajectoryError
from air.viewer import stats
from air.viewer.index import TrajectoryIndex, shared_index
from air.viewer.overview import render_overview, render_rl_runs
from air.viewer.plain import code_block, escape_markdown
from air.viewer.rl_run import find_rl_runs
from air.viewer.rollout_page import render_rollout, render_side_by_side

VIEWS = ["Overview", "Rollout", "Compare", "Problems"]
DIR_ENV = "AIR_TRAJECTORY_DIR"


def default_directory(argv: list[str]) -> str:
    """``--trajectory_dir`` after streamlit's ``--``, else $AIR_TRAJECTORY_DIR, else empty."""
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--trajectory_dir", "--trajectory-dir", default=None)
    known, _ = parser.parse_known_args(argv)
    return known.trajectory_dir or os.environ.get(DIR_ENV, "")


def _load_index(directory: str, reload: bool) -> TrajectoryIndex:
    index = shared_index(directory)  # kept by the server process, shared by its sessions
    if reload or not index.refreshed:
        bar = st.progress(0.0, text=escape_markdown(f"Reading {directory} ..."))
        index.refresh(lambda done, total: bar.progress(done / total, text=f"Reading {done:,} of {total:,} files"))
        bar.empty()
    return index


def _sidebar_filters(frame: pd.DataFrame, index: TrajectoryIndex) -> tuple[stats.Filters, str, bool]:
    side = st.sidebar
    side.header("Filters")
    runs = sorted(frame["run"].unique())
    filters = stats.Filters(
        # Only where the folder holds several runs (outputs/standalone: one folder per run).
        runs=side.multiselect("Run", runs, key="filter_runs") if len(runs) > 1 else [],
        tasks=side.multiselect("Task", sorted(frame["task"].unique()), key="filter_tasks"),
        agents=side.multiselect("Model or policy", sorted(frame["agent"].unique()), key="filter_agents"),
    )
    steps = frame["step"].dropna()
    if len(steps) and steps.min() < steps.max():
        low, high = int(steps.min()), int(steps.max())
        chosen = side.slider("Training step", low, high, (low, high), key="filter_steps")
        filters.steps = None if tuple(chosen) == (low, high) else tuple(chosen)
    filters.exit_statuses = side.multiselect(
        "Exit status", sorted(frame["exit_status"].unique()), format_func=lambda s: s or "(none)", key="filter_exit"
    )
    rewards = frame["reward"].dropna()
    if len(rewards) and rewards.min() < rewards.max():
        low, high = float(rewards.min()), float(rewards.max())
        chosen = side.slider("Reward", low, high, (low, high), step=(high - low) / 100, key="filter_reward")
        filters.reward = None if tuple(chosen) == (low, high) else tuple(chosen)
    query = side.text_input("Search commands and outputs", key="filter_query").strip()
    if query:
        with st.spinner(escape_markdown(f"Searching {len(frame):,} rollouts for {query!r} ...")):
            filters.search_hits = index.memo(("search", query), lambda: index.search(query))
    side.header("Sort")
    sorts = list(stats.SORTS)
    default = 0 if frame["reward"].notna().any() else sorts.index("score vs baseline")  # MLGym runs: no reward
    sort_by = side.selectbox("Sort by", sorts, index=default, key="sort_by")
    reverse = side.toggle("Reverse order", key="sort_reverse")
    return filters, sort_by, reverse


def _pick_from_table(keys: list[str]) -> None:
    """The overview table's selection callback: open the selected rollout."""
    rows = st.session_state["overview_table"].selection.rows
    if rows:
        st.session_state["rollout"] = keys[rows[0]]
        st.session_state["view"] = "Rollout"


def _rollout_picker(
    label: str, index: TrajectoryIndex, shown: pd.DataFrame, key: str, default: str | None
) -> str | None:
    frame = stats.index_frame(index)
    options = list(shown.index)
    current = st.session_state.get(key, default)
    if current in frame.index and current not in options:
        options.insert(0, current)  # filtered out since it was opened: keep it rather than jump away
    if not options:
        st.info("No rollout matches the filters.")
        return None
    if st.session_state.get(key) not in options:
        st.session_state[key] = current if current in options else options[0]
    labels = index.memo("labels", lambda: stats.rollout_labels(frame))
    return st.selectbox(label, options, format_func=labels.__getitem__, key=key)


def _load_record(index: TrajectoryIndex, key: str):
    try:
        return index.load(key)
    except (OSError, TrajectoryError, KeyError) as exc:
        st.error("This rollout cannot be read any more; press Reload." + code_block(str(exc)))
        return None


def _problems(index: TrajectoryIndex) -> None:
    problems = index.problems
    if not problems:
        st.success(f"All {len(index.rollouts):,} rollouts were read.")
        return
    st.warning(f"{len(problems):,} files or run folders could not be read and were skipped.")
    table = pd.DataFrame([{"file": p.key, "error": p.error} for p in problems])
    st.dataframe(table, hide_index=True, width="stretch")


def main(argv: list[str] | None = None) -> None:
    st.set_page_config(page_title="air viewer", layout="wide")
    default = default_directory(sys.argv[1:] if argv is None else argv)
    directory = st.sidebar.text_input("Trajectory folder", value=default, key="trajectory_dir").strip()
    if not directory:
        st.info("Enter a trajectory folder in the sidebar (or start with `air view DIR`).")
        return
    folder = Path(directory).expanduser()
    if not folder.is_dir():
        st.error(escape_markdown(f"{folder}: no such folder."))
        return
    directory = str(folder.resolve())
    reload = st.sidebar.button("Reload", help="Read new and changed files again")
    index = _load_index(directory, reload)
    frame = stats.index_frame(index)
    rl_runs = find_rl_runs(Path(directory))  # prime-rl run folders: their learning curve heads the overview
    if frame.empty:
        if rl_runs:  # a run whose trajectories went elsewhere (the env's trajectory_dir): its metrics.jsonl
            st.title("air viewer")
            st.caption(escape_markdown(f"{directory} · prime-rl run · no trajectories here"))
            render_rl_runs(Path(directory), rl_runs, index)
            if index.problems:
                _problems(index)
            return
        st.warning(escape_markdown(f"No readable trajectory in {directory} ({len(index.problems)} unreadable)."))
        _problems(index)
        return

    if "view" not in st.session_state:  # a shared link can name a rollout: ?rollout=<file>
        linked = st.query_params.get("rollout")
        st.session_state["view"] = "Rollout" if linked in frame.index else "Overview"
        if linked in frame.index:
            st.session_state["rollout"] = linked
    filters, sort_by, reverse = _sidebar_filters(frame, index)
    shown = stats.apply_filters(frame, filters)
    shown = stats.sort_rollouts(shown, sort_by, descending=stats.SORTS[sort_by][1] != reverse)

    st.title("air viewer")
    st.caption(escape_markdown(f"{directory} · {len(frame):,} rollouts · {len(index.problems):,} unreadable"))
    view = st.radio("View", VIEWS, horizontal=True, key="view", label_visibility="collapsed")
    if view == "Overview":
        if rl_runs:
            render_rl_runs(Path(directory), rl_runs, index)
        render_overview(frame, shown, len(index.problems), _pick_from_table)
    elif view == "Rollout":
        key = _rollout_picker("Rollout", index, shown, "rollout", None)
        if key is not None:
            st.query_params["rollout"] = key
            record = _load_record(index, key)
            if record is not None:
                render_rollout(record, key)
    elif view == "Compare":
        left, right = st.columns(2)
        with left:
            first = _rollout_picker("Left", index, shown, "compare_left", st.session_state.get("rollout"))
        with right:
            second_default = next((k for k in shown.index if k != first), first)
            second = _rollout_picker("Right", index, shown, "compare_right", second_default)
        if first is not None and second is not None:
            records = _load_record(index, first), _load_record(index, second)
            if all(r is not None for r in records):
                render_side_by_side((first, records[0]), (second, records[1]))
    else:
        _problems(index)
