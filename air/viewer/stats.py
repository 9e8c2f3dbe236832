"""The viewer's numbers, as plain pandas: filtering and sorting the rollout table, and the tables
behind each chart. Nothing here knows about Streamlit, so every figure can be tested directly."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import pandas as pd

from air.env.trajectories import TrajectoryRecord, recorded_evaluations
from air.viewer.index import RolloutSummary, TrajectoryIndex

# label -> (column, whether larger comes first by default)
SORTS: dict[str, tuple[str, bool]] = {
    "reward": ("reward", True),
    "score vs baseline": ("improvement", True),
    "final score": ("final_score", True),
    "turns": ("turns", True),
    "started": ("started_at", False),
    "duration": ("duration_s", True),
}
COLUMNS = list(RolloutSummary.__dataclass_fields__)
NUMBERS = (
    "reward",
    "advantage",
    "baseline_score",
    "best_score",
    "final_score",
    "improvement",
    "last_score",
    "duration_s",
)
# A rollout cut short (Ctrl-C, or an orchestrator that dropped it) ended mid-play: no reward, even where an
# older record wrote one, and no place in a mean, a count or a curve. It stays in the table, marked.
CANCELLED = "cancelled"


def rollout_frame(rollouts: Iterable[RolloutSummary]) -> pd.DataFrame:
    """One row per rollout, indexed by key, with numeric columns as floats (None -> NaN)."""
    frame = pd.DataFrame([r.as_row() for r in rollouts], columns=COLUMNS)
    for column in NUMBERS:
        frame[column] = pd.to_numeric(frame[column], errors="coerce").astype(float)
    frame["step"] = pd.array(frame["step"], dtype="Int64")
    frame["started_at"] = pd.to_datetime(frame["started_at"], utc=True)
    frame.loc[frame["exit_status"] == CANCELLED, ["reward", "advantage"]] = float("nan")
    return frame.set_index("key", drop=False).rename_axis(None)


def index_frame(index: TrajectoryIndex) -> pd.DataFrame:
    """The index's rollout table, built once per version of the index (treat it as read-only)."""
    return index.memo("frame", lambda: rollout_frame(index.rollouts))


@dataclass
class Filters:
    """Empty collections and None bounds mean 'no restriction'."""

    runs: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    agents: list[str] = field(default_factory=list)
    steps: tuple[int, int] | None = None
    exit_statuses: list[str] = field(default_factory=list)
    reward: tuple[float, float] | None = None
    search_hits: set[str] | None = None  # keys matching the text search; None = no search


def apply_filters(frame: pd.DataFrame, filters: Filters) -> pd.DataFrame:
    keep = pd.Series(True, index=frame.index)
    if filters.runs:
        keep &= frame["run"].isin(filters.runs)
    if filters.tasks:
        keep &= frame["task"].isin(filters.tasks)
    if filters.agents:
        keep &= frame["agent"].isin(filters.agents)
    if filters.steps is not None:
        low, high = filters.steps
        keep &= frame["step"].between(low, high).fillna(False).astype(bool)
    if filters.exit_statuses:
        keep &= frame["exit_status"].isin(filters.exit_statuses)
    if filters.reward is not None:
        low, high = filters.reward
        keep &= frame["reward"].between(low, high).fillna(False).astype(bool)
    if filters.search_hits is not None:
        keep &= frame["key"].isin(filters.search_hits)
    return frame[keep]


def sort_rollouts(frame: pd.DataFrame, by: str, descending: bool | None = None) -> pd.DataFrame:
    """Sort by one of SORTS; missing values go last either way; ties are ordered by file key."""
    column, default_descending = SORTS[by]
    ascending = not (default_descending if descending is None else descending)
    return frame.sort_values([column, "key"], ascending=[ascending, True], na_position="last", kind="stable")


def ended(frame: pd.DataFrame) -> pd.DataFrame:
    """The rollouts that ran to their end: what headline numbers count."""
    return frame[frame["exit_status"] != CANCELLED]


def whole_steps(frame: pd.DataFrame) -> pd.DataFrame:
    """The rollouts of steps that ran to their end: a step with a rollout cut short (the run stopped in it)
    never reached a trainer, and its finished rollouts alone would plot a point no step had."""
    cut = frame[frame["exit_status"] == CANCELLED]
    cut_steps = set(zip(cut["run"], cut["step"], strict=True)) if len(cut) else set()
    in_cut_step = [(run, step) in cut_steps for run, step in zip(frame["run"], frame["step"], strict=True)]
    return ended(frame[~pd.Series(in_cut_step, index=frame.index, dtype=bool)])


def has_steps(frame: pd.DataFrame) -> bool:
    return bool(frame["step"].notna().any())


def learning_curve(frame: pd.DataFrame) -> pd.DataFrame:
    """Per run and training step: mean reward, and per task the mean final score against the baseline."""
    stepped = frame[frame["step"].notna()]
    grouped = stepped.groupby(["run", "step", "task"], as_index=False).agg(
        reward=("reward", "mean"),
        final_score=("final_score", "mean"),
        best_score=("best_score", "mean"),
        baseline=("baseline_score", "first"),
        rollouts=("key", "size"),
    )
    grouped["step"] = grouped["step"].astype(int)
    return grouped


def reward_per_step(frame: pd.DataFrame) -> pd.DataFrame:
    """Mean reward per run and step: step 3 of two runs is two points, not their average."""
    stepped = frame[frame["step"].notna()]
    table = stepped.groupby(["run", "step"], as_index=False).agg(reward=("reward", "mean"), rollouts=("key", "size"))
    table["step"] = table["step"].astype(int)
    return table


def improvement_by_task(frame: pd.DataFrame) -> pd.DataFrame:
    """Per task (and agent): mean final score minus baseline, and how often the baseline was beaten."""
    scored = frame[frame["improvement"].notna()]
    table = scored.groupby(["task", "agent"], as_index=False).agg(
        improvement=("improvement", "mean"),
        beat_baseline=("improvement", lambda s: float((s > 0).mean())),
        rollouts=("key", "size"),
    )
    return table


def per_step_or_agent(frame: pd.DataFrame) -> str:
    """The x axis of the per-rollout charts: training step when recorded, else the agent."""
    return "step" if has_steps(frame) else "agent"


def validates_per_rollout(frame: pd.DataFrame) -> pd.DataFrame:
    by = per_step_or_agent(frame)
    table = (
        frame[frame[by].notna()]
        .groupby(by, as_index=False)
        .agg(validates=("validates", "mean"), rollouts=("key", "size"))
    )
    return _int_steps(table, by)


def format_error_rate(frame: pd.DataFrame) -> pd.DataFrame:
    """Format errors per turn (all turns of the group's rollouts together)."""
    by = per_step_or_agent(frame)
    table = (
        frame[frame[by].notna()]
        .groupby(by, as_index=False)
        .agg(format_errors=("format_errors", "sum"), turns=("turns", "sum"))
    )
    table["rate"] = (table["format_errors"] / table["turns"].where(table["turns"] > 0)).fillna(0.0)
    return _int_steps(table, by)


def zero_advantage_share(frame: pd.DataFrame) -> pd.DataFrame:
    """Per step, the share of GRPO groups (two or more rollouts of one run sharing a group_id) in which
    every rollout got the same reward: their advantages are all zero, so they teach the model nothing.
    A group is keyed by (run, group_id): group ``1-0`` of three runs is three groups. Empty when no
    rollout records both a group and a step."""
    grouped = frame[frame["group_id"].notna() & frame["reward"].notna() & frame["step"].notna()]
    if grouped.empty:
        return pd.DataFrame(columns=["step", "groups", "zero_advantage", "share"])
    per_group = grouped.groupby(["step", "run", "group_id"]).agg(
        size=("reward", "size"), spread=("reward", lambda s: float(s.max() - s.min()))
    )
    per_group = per_group[per_group["size"] >= 2]
    if per_group.empty:
        return pd.DataFrame(columns=["step", "groups", "zero_advantage", "share"])
    per_group["zero"] = per_group["spread"] <= 1e-12
    table = per_group.groupby(level="step").agg(groups=("zero", "size"), zero_advantage=("zero", "sum")).reset_index()
    table["share"] = table["zero_advantage"] / table["groups"]
    table["step"] = table["step"].astype(int)
    return table


def evaluation_points(record: TrajectoryRecord) -> pd.DataFrame:
    """Score after each evaluation: the turn it happened at (the final one after the last turn)."""
    rows = []
    last_turn = record.turns[-1].index if record.turns else 0
    by_identity = {id(t.evaluation): t.index for t in record.turns if t.evaluation is not None}
    for evaluation in recorded_evaluations(record):
        turn = by_identity.get(id(evaluation), last_turn + 1)
        rows.append({"turn": turn, "kind": evaluation.kind, "status": evaluation.status, "score": evaluation.score})
    return pd.DataFrame(rows, columns=["turn", "kind", "status", "score"])


def format_score(value: float | None) -> str:
    """Scores and rewards as the viewer prints them: four decimals, "n/a" when missing or NaN."""
    return "n/a" if value is None or pd.isna(value) else f"{value:.4f}"


def rollout_labels(frame: pd.DataFrame) -> dict[str, str]:
    """How rollouts are named in pickers: [run ·] task · agent · step · reward · id, by key (the run
    where the folder holds several)."""
    step = frame["step"].map(lambda v: "" if pd.isna(v) else f" · step {v}")
    reward = frame["reward"].map(lambda v: "no reward" if pd.isna(v) else f"reward {v:.3f}")
    labels = frame["task"] + " · " + frame["agent"] + step + " · " + reward + " · " + frame["id"].str[:8]
    if frame["run"].nunique() > 1:
        labels = frame["run"] + " · " + labels
    return dict(zip(frame.index, labels, strict=True))


def _int_steps(table: pd.DataFrame, by: str) -> pd.DataFrame:
    if by == "step":
        table[by] = table[by].astype(int)
    return table
