"""The trajectory viewer's data layer: the folder index (incremental refresh, bodies on demand,
search, memo), the per-rollout summary, the pandas tables behind the charts, and split_think.

Expected values are written out by hand from hand-made records and rows."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import air.viewer.index as trajectory_index
from air.env.actions import split_think, strip_think
from air.env.trajectories import SCHEMA_VERSION, BaselineInfo, Turn, TurnEvaluation, write_trajectory
from air.env.trajectory_reader import load_trajectory
from air.viewer.index import Problem, RolloutSummary, TrajectoryIndex, shared_index, summarise
from air.viewer.stats import (
    SORTS,
    Filters,
    apply_filters,
    evaluation_points,
    format_error_rate,
    has_steps,
    improvement_by_task,
    index_frame,
    learning_curve,
    per_step_or_agent,
    reward_per_step,
    rollout_frame,
    sort_rollouts,
    validates_per_rollout,
    zero_advantage_share,
)
from rigs.mlgym_runs import RUN_NAME, write_mlgym_run
from tests.env.test_trajectories import make_record

# make_record() is written to <dir>/toyGrid/20250304-050607-3f2a9c0d1e4b.json
RECORD_KEY = "toyGrid/20250304-050607-3f2a9c0d1e4b.json"
BROKEN_RUN_NAME = RUN_NAME.replace("_run_3", "_run_4")


# --- helpers -------------------------------------------------------------------------------------


class CountingLoads:
    """Wraps load_trajectory in air.trajectory_index and remembers every path it was given."""

    def __init__(self) -> None:
        self.paths: list[Path] = []

    def __call__(self, path):
        self.paths.append(Path(path))
        return load_trajectory(path)


@pytest.fixture
def count_loads(monkeypatch) -> CountingLoads:
    counter = CountingLoads()
    monkeypatch.setattr(trajectory_index, "load_trajectory", counter)
    return counter


def record_json(**overrides) -> dict:
    return json.loads(make_record(**overrides).model_dump_json())


def build_folder(root: Path) -> Path:
    """Three of our records at depths 1, 2 and 4, an MLGym run, five broken inputs, and files that
    must be ignored (all of them valid records, so counting them would show)."""
    runs = root / "runs"
    write_trajectory(make_record(), runs)  # depth 2
    write_trajectory(make_record(id="b0b0b0b0b0b0b0b0", task="deepTask"), runs / "deep" / "er")  # depth 4
    (runs / "top.json").write_text(make_record(id="c0c0c0c0c0c0c0c0", policy="replay").model_dump_json())
    write_mlgym_run(runs / "mlgym")

    bad = runs / "bad"
    bad.mkdir()
    (bad / "invalid.json").write_text('{"id": "abc", ')
    missing = record_json()
    del missing["exit_status"]
    (bad / "missing.json").write_text(json.dumps(missing))
    (bad / "empty.json").write_text("")
    (bad / "newer.json").write_text(json.dumps(record_json() | {"schema_version": SCHEMA_VERSION + 1}))
    broken_run = runs / "mlgym" / BROKEN_RUN_NAME
    broken_run.mkdir()
    (broken_run / "mazeRunner.traj").write_text('{"trajectory": [')
    (broken_run / "results.json").write_text(json.dumps({"agent": [], "baseline": {}}))

    valid = make_record(id="d0d0d0d0d0d0d0d0").model_dump_json()
    (runs / ".hidden.json").write_text(valid)
    (runs / ".cache").mkdir()
    (runs / ".cache" / "shown.json").write_text(valid)
    (runs / "toyGrid" / ".20250304-050607-d0d0d0d0d0d0.json.k3j2.tmp").write_text(valid)
    (runs / "toyGrid" / "results.json").write_text(valid)  # MLGym's score file name, outside a run folder
    (runs / "notes.txt").write_text(valid)
    return runs


def row(key: str, **fields) -> RolloutSummary:
    values: dict = dict(
        key=key,
        path=f"/runs/{key}",
        run="runs",
        source="air",
        id=key,
        task="titanic",
        agent="m1",
        model="m1",
        step=None,
        group_id=None,
        exit_status="submitted",
        reward=None,
        advantage=None,
        metric="accuracy",
        higher_is_better=True,
        baseline_score=None,
        best_score=None,
        final_score=None,
        improvement=None,
        turns=1,
        validates=0,
        evaluations=0,
        format_errors=0,
        suspicious_evaluations=0,
        timeouts=0,
        duration_s=None,
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        error=None,
    )
    values.update(fields)
    return RolloutSummary(**values)


def keys(frame: pd.DataFrame) -> list[str]:
    return list(frame["key"])


def records(table: pd.DataFrame) -> list[dict]:
    return table.to_dict("records")


# --- 1. the index: what it finds, what it cannot read --------------------------------------------


def test_index_counts_rollouts_and_problems_exactly(tmp_path: Path) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs).refresh()

    rollouts = {r.key: r for r in index.rollouts}
    assert sorted(rollouts) == sorted(
        [
            RECORD_KEY,
            "deep/er/deepTask/20250304-050607-b0b0b0b0b0b0.json",
            "top.json",
            f"mlgym/{RUN_NAME}",
        ]
    )
    problems = {p.key: p for p in index.problems}
    assert sorted(problems) == sorted(
        ["bad/invalid.json", "bad/missing.json", "bad/empty.json", "bad/newer.json", f"mlgym/{BROKEN_RUN_NAME}"]
    )
    assert all(isinstance(p, Problem) for p in index.problems)

    expected_error = {
        "bad/invalid.json": "invalid JSON",
        "bad/missing.json": "exit_status: missing field",
        "bad/empty.json": "the file is empty",
        "bad/newer.json": f"schema version {SCHEMA_VERSION + 1} is not one this air-agent reads",
        f"mlgym/{BROKEN_RUN_NAME}": "invalid JSON",
    }
    for key, words in expected_error.items():
        problem = problems[key]
        assert problem.path == str(runs / key)
        assert words in problem.error, (key, problem.error)
    for name in ("invalid", "missing", "empty", "newer"):
        assert str(runs / "bad" / f"{name}.json") in problems[f"bad/{name}.json"].error
    # the run folder's problem names the broken file inside it
    assert str(runs / "mlgym" / BROKEN_RUN_NAME / "mazeRunner.traj") in problems[f"mlgym/{BROKEN_RUN_NAME}"].error


def test_index_summaries_of_our_records_and_an_mlgym_run(tmp_path: Path) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs).refresh()

    ours = index.summary(RECORD_KEY)
    assert ours.path == str(runs / RECORD_KEY)
    assert (ours.source, ours.id, ours.task, ours.agent, ours.model) == (
        "air",
        "3f2a9c0d1e4b5a6978877665",
        "toyGrid",
        "tiny-lm",
        "tiny-lm",
    )
    assert (ours.step, ours.group_id, ours.exit_status) == (4, "g-17", "submitted")
    assert (ours.reward, ours.advantage, ours.duration_s) == (0.41, -0.1, 173.0)
    assert (ours.metric, ours.higher_is_better) == ("accuracy", True)
    assert (ours.baseline_score, ours.best_score, ours.final_score) == (0.5, 0.91, 0.91)
    assert ours.improvement == pytest.approx(0.41)
    assert (ours.turns, ours.validates, ours.evaluations, ours.format_errors, ours.timeouts) == (4, 1, 2, 1, 0)
    assert ours.started_at == datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
    assert ours.error is None
    assert index.summary("top.json").agent == "replay"

    run = index.summary(f"mlgym/{RUN_NAME}")
    assert (run.source, run.task, run.agent, run.model) == ("mlgym", "mazeRunner", "acme-tiny-7b", "acme-tiny-7b")
    # 7 steps; three of them validate; the timed-out python run; the submit carries the final score
    assert (run.turns, run.validates, run.evaluations, run.timeouts, run.format_errors) == (7, 3, 4, 1, 0)
    assert run.path == str(runs / "mlgym" / RUN_NAME)


def test_index_of_a_missing_folder_names_it(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such folder"):
        TrajectoryIndex(tmp_path / "absent").refresh()


def test_summary_of_a_problem_or_unknown_key_raises_key_error(tmp_path: Path) -> None:
    index = TrajectoryIndex(build_folder(tmp_path)).refresh()
    with pytest.raises(KeyError):
        index.summary("bad/invalid.json")
    with pytest.raises(KeyError):
        index.summary("nowhere.json")


def test_progress_reports_the_end(tmp_path: Path) -> None:
    runs = build_folder(tmp_path)
    calls: list[tuple[int, int]] = []
    TrajectoryIndex(runs).refresh(progress=lambda done, total: calls.append((done, total)))
    assert calls == [(9, 9)]  # 4 rollouts + 5 problems, fewer than 250


# --- 2. incremental refresh ----------------------------------------------------------------------


def test_refresh_rereads_only_what_changed(tmp_path: Path, count_loads: CountingLoads) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs)
    assert index.version == 0 and not index.refreshed
    index.refresh()
    assert index.refreshed and index.version == 1
    assert len(count_loads.paths) == 9
    count_loads.paths.clear()

    index.refresh()  # nothing changed
    assert count_loads.paths == []
    assert index.version == 1

    path = runs / RECORD_KEY
    write_trajectory(make_record(exit_status="max_turns_reached"), runs)  # longer: a different size
    index.refresh()
    assert count_loads.paths == [path]
    assert index.summary(RECORD_KEY).exit_status == "max_turns_reached"
    assert index.version == 2
    count_loads.paths.clear()

    new = write_trajectory(make_record(id="e0e0e0e0e0e0e0e0", task="newTask"), runs)
    index.refresh()
    assert count_loads.paths == [new]
    assert index.summary("newTask/20250304-050607-e0e0e0e0e0e0.json").id == "e0e0e0e0e0e0e0e0"
    assert len(index.rollouts) == 5 and len(index.problems) == 5
    assert index.version == 3
    count_loads.paths.clear()

    os.remove(runs / "top.json")
    index.refresh()
    assert count_loads.paths == []
    assert "top.json" not in {r.key for r in index.rollouts}
    assert len(index.rollouts) == 4
    assert index.version == 4

    index.refresh()
    assert count_loads.paths == [] and index.version == 4


def test_refresh_rereads_an_mlgym_run_when_a_file_in_it_changes(tmp_path: Path, count_loads) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs).refresh()
    count_loads.paths.clear()
    results = runs / "mlgym" / RUN_NAME / "results.json"
    results.write_text(json.dumps(json.loads(results.read_text())))  # same data, no indentation: smaller
    index.refresh()
    assert count_loads.paths == [runs / "mlgym" / RUN_NAME]
    assert index.version == 2


def test_a_fixed_file_moves_from_problems_to_rollouts(tmp_path: Path, count_loads) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs).refresh()
    count_loads.paths.clear()
    (runs / "bad" / "empty.json").write_text(make_record(id="f0f0f0f0f0f0f0f0").model_dump_json())
    index.refresh()
    assert count_loads.paths == [runs / "bad" / "empty.json"]
    assert "bad/empty.json" in {r.key for r in index.rollouts}
    assert "bad/empty.json" not in {p.key for p in index.problems}
    assert index.summary("bad/empty.json").id == "f0f0f0f0f0f0f0f0"


def test_refresh_of_an_empty_folder_keeps_version_zero(tmp_path: Path) -> None:
    index = TrajectoryIndex(tmp_path).refresh()
    assert index.rollouts == [] and index.problems == []
    assert index.version == 0 and index.refreshed


# --- 3. load -------------------------------------------------------------------------------------


def test_load_returns_the_full_record_and_caches_it(tmp_path: Path, count_loads) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs).refresh()
    count_loads.paths.clear()

    record = index.load(RECORD_KEY)
    assert record == make_record()
    assert [t.command for t in record.turns] == ["ls -la", None, "validate", "submit"]
    assert count_loads.paths == [runs / RECORD_KEY]
    assert index.load(RECORD_KEY) is record
    assert count_loads.paths == [runs / RECORD_KEY]  # a cache hit reads nothing

    mlgym = index.load(f"mlgym/{RUN_NAME}")
    assert mlgym.source == "mlgym" and len(mlgym.turns) == 7


def test_load_sees_a_file_changed_on_disk(tmp_path: Path) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs).refresh()
    first = index.load(RECORD_KEY)
    write_trajectory(make_record(exit_status="cancelled-by-the-user", reward=-3.0), runs)  # not refreshed
    second = index.load(RECORD_KEY)
    assert second is not first
    assert (second.exit_status, second.reward) == ("cancelled-by-the-user", -3.0)
    index.refresh()
    assert index.load(RECORD_KEY) is second


def test_load_of_an_unknown_key_or_a_problem_raises_key_error(tmp_path: Path) -> None:
    index = TrajectoryIndex(build_folder(tmp_path)).refresh()
    with pytest.raises(KeyError):
        index.load("toyGrid/nothing.json")
    with pytest.raises(KeyError):
        index.load("bad/missing.json")


def test_body_cache_keeps_the_most_recently_used(tmp_path: Path, count_loads) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs, body_cache_size=1).refresh()
    count_loads.paths.clear()
    a = index.load(RECORD_KEY)
    index.load("top.json")
    again = index.load(RECORD_KEY)
    assert again is not a and again == a
    assert count_loads.paths == [runs / RECORD_KEY, runs / "top.json", runs / RECORD_KEY]


# --- 4. search -----------------------------------------------------------------------------------


def searchable(root: Path) -> Path:
    runs = root / "runs"
    base = dict(
        task_prompt="Teach the Giraffe to count.",
        system_prompt="You are a Pelican.",
    )
    write_trajectory(
        make_record(
            id="a1a1a1a1a1a1a1a1",
            turns=[
                Turn(index=1, model_text="I think about a Zebra.", command="python TRAIN.py --fast", output="done"),
                Turn(index=2, model_text="ok", command="cat log", output="Final Accuracy: 0.93"),
            ],
            **base,
        ),
        runs,
    )
    write_trajectory(
        make_record(
            id="b2b2b2b2b2b2b2b2",
            turns=[Turn(index=1, model_text="zebra zebra", command=None, format_error="no block", output="no block")],
            **base,
        ),
        runs,
    )
    return runs


A_KEY = "toyGrid/20250304-050607-a1a1a1a1a1a1.json"
B_KEY = "toyGrid/20250304-050607-b2b2b2b2b2b2.json"


def test_search_is_case_insensitive_over_commands_and_outputs_only(tmp_path: Path) -> None:
    index = TrajectoryIndex(searchable(tmp_path)).refresh()
    assert index.search("train.py") == {A_KEY}  # command, other case
    assert index.search("ACCURACY") == {A_KEY}  # output, other case
    assert index.search("no BLOCK") == {B_KEY}  # a format error's output
    assert index.search("zebra") == set()  # only in model_text
    assert index.search("giraffe") == set()  # only in the task prompt
    assert index.search("pelican") == set()  # only in the system prompt
    assert index.search("o") == {A_KEY, B_KEY}


def test_search_within_given_keys_skips_unknown_and_vanished_ones(tmp_path: Path) -> None:
    runs = searchable(tmp_path)
    index = TrajectoryIndex(runs).refresh()
    assert index.search("o", keys=[B_KEY]) == {B_KEY}
    assert index.search("o", keys=[A_KEY, "nowhere.json"]) == {A_KEY}
    os.remove(runs / B_KEY)
    assert index.search("o") == {A_KEY}


def test_search_does_not_disturb_the_body_cache(tmp_path: Path, count_loads) -> None:
    runs = searchable(tmp_path)
    index = TrajectoryIndex(runs, body_cache_size=1).refresh()
    record = index.load(A_KEY)
    index.search("o")
    count_loads.paths.clear()
    assert index.load(A_KEY) is record
    assert count_loads.paths == []


# --- 5. memo -------------------------------------------------------------------------------------


def test_memo_builds_once_per_version(tmp_path: Path) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs).refresh()
    builds: list[int] = []

    def build() -> list[int]:
        builds.append(len(index.rollouts))
        return list(builds)

    first = index.memo("table", build)
    assert index.memo("table", build) is first
    index.refresh()  # unchanged: same version, same table
    assert index.memo("table", build) is first
    assert builds == [4]

    write_trajectory(make_record(id="e0e0e0e0e0e0e0e0"), runs)
    index.refresh()
    second = index.memo("table", build)
    assert second is not first and builds == [4, 5]
    assert index.memo("table", build) is second
    assert index.memo("other", lambda: "x") == "x"  # names are separate
    assert builds == [4, 5]


def test_index_frame_is_memoised_per_version(tmp_path: Path) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs).refresh()
    frame = index_frame(index)
    assert index_frame(index) is frame
    assert sorted(frame.index) == sorted(r.key for r in index.rollouts)
    os.remove(runs / "top.json")
    index.refresh()
    assert "top.json" not in index_frame(index).index


def test_memo_does_not_keep_a_table_built_before_a_concurrent_refresh(tmp_path: Path) -> None:
    runs = build_folder(tmp_path)
    index = TrajectoryIndex(runs).refresh()

    def build_while_a_refresh_lands() -> int:
        count = len(index.rollouts)  # the table is built from version 1's rows...
        write_trajectory(make_record(id="e0e0e0e0e0e0e0e0"), runs)
        index.refresh()  # ...while another session refreshes to version 2
        return count

    assert index.memo("count", build_while_a_refresh_lands) == 4
    assert index.version == 2
    assert index.memo("count", lambda: len(index.rollouts)) == 5


# --- 6. shared_index -----------------------------------------------------------------------------


def test_shared_index_is_one_per_folder_however_spelled(tmp_path: Path, monkeypatch) -> None:
    runs = tmp_path / "runs"
    runs.mkdir()
    (tmp_path / "other").mkdir()
    monkeypatch.chdir(tmp_path)
    index = shared_index(runs)
    assert shared_index("runs") is index
    assert shared_index("runs/") is index
    assert shared_index(f"{runs}/") is index
    assert shared_index(str(runs)) is index
    assert shared_index("./other/../runs") is index
    assert index.directory == runs.resolve()
    assert shared_index("other") is not index


# --- 7. summarise --------------------------------------------------------------------------------


def test_agent_is_the_policy_else_the_model_else_unknown(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    assert summarise(make_record(policy="replay", model="m"), path, tmp_path).agent == "replay"
    assert summarise(make_record(policy=None, model="m"), path, tmp_path).agent == "m"
    unknown = summarise(make_record(policy=None, model=None), path, tmp_path)
    assert (unknown.agent, unknown.model) == ("unknown", None)


def test_key_is_relative_to_the_root_else_the_whole_path(tmp_path: Path) -> None:
    record = make_record()
    assert summarise(record, tmp_path / "a" / "b.json", tmp_path).key == "a/b.json"
    elsewhere = tmp_path.parent / "elsewhere.json"
    assert summarise(record, elsewhere, tmp_path / "root").key == elsewhere.as_posix()


def test_nan_scores_become_none(tmp_path: Path) -> None:
    nan = math.nan
    final = TurnEvaluation(status="ok", score=nan, metrics={"accuracy": nan}, kind="final")
    record = make_record(
        turns=make_record().turns[:3],  # one validate scoring 0.8
        final_evaluation=final,
        baseline=BaselineInfo(metric="accuracy", score=nan),
        reward=nan,
        advantage=nan,
        duration_s=nan,
    )
    summary = summarise(record, tmp_path / "x.json", tmp_path)
    assert summary.reward is None and summary.advantage is None and summary.duration_s is None
    assert summary.baseline_score is None and summary.final_score is None and summary.improvement is None
    assert summary.best_score == 0.8  # the NaN final is not a best score
    assert summary.evaluations == 2  # the validate and the end-of-rollout evaluation

    only_final_nan = summarise(make_record(final_evaluation=final, turns=[]), tmp_path / "x.json", tmp_path)
    assert only_final_nan.baseline_score == 0.5
    assert only_final_nan.final_score is None and only_final_nan.improvement is None
    assert only_final_nan.best_score is None


@pytest.mark.parametrize(
    ("higher_is_better", "final", "improvement", "best"),
    [
        (True, 0.7, -0.3, 0.8),  # accuracy fell from 1.0
        (True, 1.2, 0.2, 1.2),
        (False, 0.7, 0.3, 0.7),  # a loss fell from 1.0: better
        (False, 1.2, -0.2, 0.8),
    ],
)
def test_improvement_sign_follows_the_metric_direction(
    tmp_path: Path, higher_is_better: bool, final: float, improvement: float, best: float
) -> None:
    record = make_record(
        turns=make_record().turns[:3],  # one validate scoring 0.8
        baseline=BaselineInfo(metric="m", score=1.0, higher_is_better=higher_is_better),
        final_evaluation=TurnEvaluation(status="ok", score=final, metrics={"m": final}, kind="final"),
    )
    summary = summarise(record, tmp_path / "x.json", tmp_path)
    assert summary.higher_is_better is higher_is_better
    assert summary.improvement == pytest.approx(improvement)
    assert summary.best_score == pytest.approx(best)
    assert summary.final_score == final and summary.baseline_score == 1.0


def test_evaluations_count_a_submit_once(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    assert summarise(make_record(), path, tmp_path).evaluations == 2  # validate + submit (also final)
    assert summarise(make_record(final_evaluation=None), path, tmp_path).evaluations == 2
    no_final = make_record(turns=make_record().turns[:3], final_evaluation=None)
    assert summarise(no_final, path, tmp_path).evaluations == 1
    assert summarise(make_record(turns=[], final_evaluation=None), path, tmp_path).evaluations == 0


# --- 8. rollout_stats ----------------------------------------------------------------------------


@pytest.fixture
def filter_frame() -> pd.DataFrame:
    return rollout_frame(
        [
            row("a", task="titanic", agent="m1", step=0, exit_status="submitted", reward=1.0),
            row("b", task="titanic", agent="m2", step=1, exit_status="max_turns", reward=0.5),
            row("c", task="house", agent="m1", step=2, exit_status="submitted", reward=None),
            row("d", task="house", agent="m2", step=None, exit_status="error", reward=2.0),
            row("e", task="loss", agent="scripted", step=3, exit_status="format_errors", reward=-1.0),
        ]
    )


def test_rollout_frame_types(filter_frame: pd.DataFrame) -> None:
    assert list(filter_frame.index) == ["a", "b", "c", "d", "e"]
    assert math.isnan(filter_frame.loc["c", "reward"])
    assert filter_frame["step"].isna().tolist() == [False, False, False, True, False]
    assert str(filter_frame["started_at"].dt.tz) == "UTC"


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        (Filters(), ["a", "b", "c", "d", "e"]),
        (Filters(tasks=["titanic"]), ["a", "b"]),
        (Filters(tasks=["titanic", "loss"]), ["a", "b", "e"]),
        (Filters(agents=["m1"]), ["a", "c"]),
        (Filters(steps=(1, 2)), ["b", "c"]),  # bounds included; d has no step
        (Filters(steps=(0, 10)), ["a", "b", "c", "e"]),
        (Filters(exit_statuses=["submitted", "error"]), ["a", "c", "d"]),
        (Filters(reward=(0.5, 2.0)), ["a", "b", "d"]),  # bounds included; c has no reward
        (Filters(reward=(-10.0, 10.0)), ["a", "b", "d", "e"]),
        (Filters(search_hits={"a", "c", "zzz"}), ["a", "c"]),
        (Filters(search_hits=set()), []),
        (Filters(tasks=["titanic", "house"], agents=["m1"], steps=(0, 5)), ["a", "c"]),
        (Filters(tasks=["titanic", "house"], agents=["m1"], steps=(0, 5), reward=(0.0, 2.0)), ["a"]),
        (Filters(tasks=["house"], exit_statuses=["error"]), ["d"]),
        (Filters(tasks=["house"], exit_statuses=["error"], steps=(0, 100)), []),
        (Filters(agents=["m2"], search_hits={"b", "d", "e"}, exit_statuses=["max_turns", "error"]), ["b", "d"]),
    ],
)
def test_filters(filter_frame: pd.DataFrame, filters: Filters, expected: list[str]) -> None:
    assert keys(apply_filters(filter_frame, filters)) == expected


def test_sorts_are_the_documented_ones() -> None:
    assert SORTS == {
        "reward": ("reward", True),
        "score vs baseline": ("improvement", True),
        "final score": ("final_score", True),
        "turns": ("turns", True),
        "started": ("started_at", False),
        "duration": ("duration_s", True),
    }


T0 = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize("label", ["reward", "score vs baseline", "final score", "duration"])
def test_sort_by_a_nullable_column(label: str) -> None:
    column = {"reward": "reward", "score vs baseline": "improvement", "final score": "final_score"}.get(
        label, "duration_s"
    )
    values = {"a": 1.0, "b": 3.0, "c": None, "d": 3.0, "e": 2.0, "f": None}
    frame = rollout_frame([row(k, **{column: v}) for k, v in values.items()])
    assert keys(sort_rollouts(frame, label)) == ["b", "d", "e", "a", "c", "f"]  # larger first
    assert keys(sort_rollouts(frame, label, descending=True)) == ["b", "d", "e", "a", "c", "f"]
    assert keys(sort_rollouts(frame, label, descending=False)) == ["a", "e", "b", "d", "c", "f"]


def test_sort_by_turns() -> None:
    frame = rollout_frame([row(k, turns=v) for k, v in {"d": 3, "a": 1, "b": 3, "e": 2}.items()])
    assert keys(sort_rollouts(frame, "turns")) == ["b", "d", "e", "a"]
    assert keys(sort_rollouts(frame, "turns", descending=False)) == ["a", "e", "b", "d"]


def test_sort_by_start_is_oldest_first_by_default() -> None:
    minutes = {"d": 3, "a": 1, "b": 3, "e": 2}
    frame = rollout_frame([row(k, started_at=T0 + timedelta(minutes=m)) for k, m in minutes.items()])
    assert keys(sort_rollouts(frame, "started")) == ["a", "e", "b", "d"]
    assert keys(sort_rollouts(frame, "started", descending=True)) == ["b", "d", "e", "a"]


def test_sort_of_an_unknown_label_raises() -> None:
    with pytest.raises(KeyError):
        sort_rollouts(rollout_frame([row("a")]), "colour")


@pytest.fixture
def curve_frame() -> pd.DataFrame:
    def r(key, step, task, reward, final, best, baseline):
        return row(
            key, step=step, task=task, reward=reward, final_score=final, best_score=best, baseline_score=baseline
        )

    return rollout_frame(
        [
            r("k1", 0, "titanic", 1.0, 0.70, 0.75, 0.5),
            r("k2", 0, "titanic", 3.0, 0.80, 0.85, 0.5),
            r("k3", 0, "house", 2.0, 0.90, 0.90, 0.88),
            r("k4", 1, "titanic", 4.0, 0.60, 0.70, 0.5),
            r("k5", 1, "titanic", None, None, 0.65, 0.5),
            r("k6", None, "titanic", 100.0, 100.0, 100.0, 0.5),  # no step: not on the curve
        ]
    )


def test_learning_curve_means_per_step_and_task(curve_frame: pd.DataFrame) -> None:
    table = learning_curve(curve_frame)
    assert table["step"].dtype.kind == "i"
    got = records(table)
    expected = [
        {"step": 0, "task": "house", "reward": 2.0, "final_score": 0.9, "best_score": 0.9, "baseline": 0.88},
        {"step": 0, "task": "titanic", "reward": 2.0, "final_score": 0.75, "best_score": 0.8, "baseline": 0.5},
        {"step": 1, "task": "titanic", "reward": 4.0, "final_score": 0.6, "best_score": 0.675, "baseline": 0.5},
    ]
    assert [r["rollouts"] for r in got] == [1, 2, 2]
    assert len(got) == len(expected)
    for g, e in zip(got, expected, strict=True):
        assert (g["step"], g["task"]) == (e["step"], e["task"])
        for column in ("reward", "final_score", "best_score", "baseline"):
            assert g[column] == pytest.approx(e[column]), column


def test_reward_per_step(curve_frame: pd.DataFrame) -> None:
    table = reward_per_step(curve_frame)
    assert table["step"].dtype.kind == "i"
    assert table["step"].tolist() == [0, 1]
    assert table["reward"].tolist() == pytest.approx([2.0, 4.0])  # (1 + 3 + 2) / 3; 4 (the missing one skipped)
    assert table["rollouts"].tolist() == [3, 2]


def test_improvement_by_task_and_agent() -> None:
    frame = rollout_frame(
        [
            row("a", task="titanic", agent="m1", improvement=0.2),
            row("b", task="titanic", agent="m1", improvement=-0.1),
            row("c", task="titanic", agent="m1", improvement=0.0),  # equal is not beating
            row("d", task="titanic", agent="m1", improvement=None),  # unscored: left out
            row("e", task="titanic", agent="m2", improvement=0.5),
            row("f", task="house", agent="m1", improvement=-0.3),
            row("g", task="house", agent="m1", improvement=-0.2),
        ]
    )
    got = records(improvement_by_task(frame))
    assert [(r["task"], r["agent"], r["rollouts"]) for r in got] == [
        ("house", "m1", 2),
        ("titanic", "m1", 3),
        ("titanic", "m2", 1),
    ]
    assert [r["improvement"] for r in got] == pytest.approx([-0.25, 0.1 / 3, 0.5])
    assert [r["beat_baseline"] for r in got] == pytest.approx([0.0, 1 / 3, 1.0])


def test_per_step_or_agent() -> None:
    assert per_step_or_agent(rollout_frame([row("a"), row("b")])) == "agent"
    assert not has_steps(rollout_frame([row("a"), row("b")]))
    assert per_step_or_agent(rollout_frame([row("a"), row("b", step=0)])) == "step"
    assert has_steps(rollout_frame([row("a", step=0)]))


def test_format_error_rate_and_validates_per_step() -> None:
    frame = rollout_frame(
        [
            row("a", step=0, turns=10, format_errors=2, validates=3),
            row("b", step=0, turns=5, format_errors=1, validates=1),
            row("c", step=1, turns=0, format_errors=0, validates=0),
            row("d", step=2, turns=4, format_errors=4, validates=5),
            row("e", step=None, turns=100, format_errors=50, validates=9),  # no step: left out
        ]
    )
    rate = records(format_error_rate(frame))
    assert [(r["step"], r["format_errors"], r["turns"]) for r in rate] == [(0, 3, 15), (1, 0, 0), (2, 4, 4)]
    assert [r["rate"] for r in rate] == pytest.approx([0.2, 0.0, 1.0])
    validates = records(validates_per_rollout(frame))
    assert [(r["step"], r["rollouts"]) for r in validates] == [(0, 2), (1, 1), (2, 1)]
    assert [r["validates"] for r in validates] == pytest.approx([2.0, 0.0, 5.0])
    assert format_error_rate(frame)["step"].dtype.kind == "i"


def test_format_error_rate_and_validates_per_agent_without_steps() -> None:
    frame = rollout_frame(
        [
            row("a", agent="m1", turns=10, format_errors=2, validates=4),
            row("b", agent="m1", turns=10, format_errors=3, validates=1),
            row("c", agent="m2", turns=0, format_errors=0, validates=0),
        ]
    )
    rate = records(format_error_rate(frame))
    assert [(r["agent"], r["format_errors"], r["turns"]) for r in rate] == [("m1", 5, 20), ("m2", 0, 0)]
    assert [r["rate"] for r in rate] == pytest.approx([0.25, 0.0])
    validates = records(validates_per_rollout(frame))
    assert [(r["agent"], r["rollouts"]) for r in validates] == [("m1", 2), ("m2", 1)]
    assert [r["validates"] for r in validates] == pytest.approx([2.5, 0.0])


def test_zero_advantage_share_counts_groups_with_identical_rewards() -> None:
    frame = rollout_frame(
        [
            row("a1", step=0, group_id="g1", reward=1.0),
            row("a2", step=0, group_id="g1", reward=1.0),
            row("a3", step=0, group_id="g1", reward=1.0),  # g1: all equal -> zero advantage
            row("b1", step=0, group_id="g2", reward=0.0),
            row("b2", step=0, group_id="g2", reward=1.0),  # g2: spread -> not zero
            row("c1", step=0, group_id="g3", reward=5.0),  # singleton: ignored
            row("n1", step=0, group_id=None, reward=7.0),  # no group: ignored
            row("d1", step=1, group_id="g4", reward=2.0),
            row("d2", step=1, group_id="g4", reward=2.0),  # g4: zero
            row("e1", step=1, group_id="g5", reward=0.5),
            row("e2", step=1, group_id="g5", reward=None),  # g5 has one reward left: ignored
            row("f1", step=None, group_id="g6", reward=3.0),
            row("f2", step=None, group_id="g6", reward=3.0),  # no step: not on a per-step chart
        ]
    )
    got = records(zero_advantage_share(frame))
    assert [(r["step"], r["groups"], r["zero_advantage"]) for r in got] == [(0, 2, 1), (1, 1, 1)]
    assert [r["share"] for r in got] == pytest.approx([0.5, 1.0])


def test_zero_advantage_share_is_empty_without_groups_of_two() -> None:
    no_groups = zero_advantage_share(rollout_frame([row("a", step=0, reward=1.0), row("b", step=0, reward=1.0)]))
    assert no_groups.empty and list(no_groups.columns) == ["step", "groups", "zero_advantage", "share"]
    singletons = zero_advantage_share(
        rollout_frame([row("a", step=0, group_id="g1", reward=1.0), row("b", step=0, group_id="g2", reward=1.0)])
    )
    assert singletons.empty and list(singletons.columns) == ["step", "groups", "zero_advantage", "share"]


def _eval(score: float | None, kind: str = "validate", status: str = "ok") -> TurnEvaluation:
    return TurnEvaluation(status=status, score=score, metrics=None if score is None else {"m": score}, kind=kind)


def test_evaluation_points_count_a_submit_once(tmp_path: Path) -> None:
    submit = _eval(0.8, "submit")
    record = make_record(
        turns=[
            Turn(index=1, model_text="", command="ls"),
            Turn(index=2, model_text="", command="validate", evaluation=_eval(0.6)),
            Turn(index=3, model_text="", command=None, format_error="no block"),
            Turn(index=4, model_text="", command="validate", evaluation=_eval(0.7)),
            Turn(index=5, model_text="", command="submit", evaluation=submit),
        ],
        final_evaluation=submit,
    )
    expected = [
        {"turn": 2, "kind": "validate", "status": "ok", "score": 0.6},
        {"turn": 4, "kind": "validate", "status": "ok", "score": 0.7},
        {"turn": 5, "kind": "submit", "status": "ok", "score": 0.8},
    ]
    assert records(evaluation_points(record)) == expected
    # read back from a file the turn's and the final evaluation are two equal objects
    loaded = load_trajectory(write_trajectory(record, tmp_path))
    assert loaded.turns[-1].evaluation is not loaded.final_evaluation
    assert records(evaluation_points(loaded)) == expected


def test_evaluation_points_put_a_final_evaluation_after_the_last_turn() -> None:
    record = make_record(
        turns=[
            Turn(index=1, model_text="", command="validate", evaluation=_eval(0.6)),
            Turn(index=2, model_text="", command="ls"),
            Turn(index=3, model_text="", command="cat x"),
        ],
        final_evaluation=_eval(None, "final", "submission_not_found"),
    )
    got = records(evaluation_points(record))
    assert got[0] == {"turn": 1, "kind": "validate", "status": "ok", "score": 0.6}
    assert (got[1]["turn"], got[1]["kind"], got[1]["status"]) == (4, "final", "submission_not_found")
    assert got[1]["score"] is None or math.isnan(got[1]["score"])
    assert len(got) == 2

    scored_final = make_record(turns=record.turns, final_evaluation=_eval(0.6, "final"))
    assert records(evaluation_points(scored_final))[1] == {"turn": 4, "kind": "final", "status": "ok", "score": 0.6}

    no_turns = make_record(turns=[], final_evaluation=_eval(0.5, "final"))
    assert records(evaluation_points(no_turns)) == [{"turn": 1, "kind": "final", "status": "ok", "score": 0.5}]
    empty = evaluation_points(make_record(turns=[], final_evaluation=None))
    assert empty.empty and list(empty.columns) == ["turn", "kind", "status", "score"]


# --- 9. split_think ------------------------------------------------------------------------------

THINK_CASES = [
    ("a<think>x</think>b", ("ab", "x")),
    ("<think> one </think>A<THINK>two</Think>B", ("AB", "one\n\ntwo")),
    ("< think >line 1\nline 2</ think >\nanswer", ("\nanswer", "line 1\nline 2")),
    ("<think></think>x", ("x", "")),
    ("reasoning here</think>\nanswer", ("\nanswer", "reasoning here")),  # the template opened the tag
    ("<think>a</think>mid</think>end", ("end", "amid")),  # orphan after a block: all before it is thinking
    ("pre<think>a</think>mid</think>end", ("end", "preamid")),
    ("answer <think>still thinking", ("answer ", "still thinking")),
    ("b<think>a</think>c<think>d", ("bc", "a\n\nd")),
    ("<think>a<think>b</think>c", ("c", "a<think>b")),  # a <think> inside thinking is more thinking
    ("plain text, no tags", ("plain text, no tags", "")),
    ("", ("", "")),
]


@pytest.mark.parametrize(("text", "expected"), THINK_CASES)
def test_split_think(text: str, expected: tuple[str, str]) -> None:
    assert split_think(text) == expected
    assert strip_think(text) == expected[0]


_pieces = st.lists(
    st.one_of(
        st.sampled_from(["<think>", "</think>", "<THINK>", "</ Think >", "\n", " "]),
        st.text(alphabet="ab<>/\n ", max_size=6),
    ),
    max_size=10,
)


@settings(max_examples=200, deadline=None)
@given(pieces=_pieces)
def test_strip_think_is_the_visible_part_of_split_think(pieces: list[str]) -> None:
    text = "".join(pieces)
    visible, thinking = split_think(text)
    assert strip_think(text) == visible
    assert "<think>" not in visible.lower().replace(" ", "")  # no tag survives in the visible text
    assert len(visible) + len(thinking) <= len(text)
