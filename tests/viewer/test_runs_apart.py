"""Several runs in one folder (`air view outputs/standalone`): each rollout knows its run, groups are
keyed by (run, group_id) so three runs' group ``1-0`` stay three groups, a run can be filtered, and
W&B's own files in a run folder are not taken for broken trajectories."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from air.env.trajectories import BaselineInfo, TrajectoryRecord, write_trajectory
from air.viewer.index import TrajectoryIndex, run_of
from air.viewer.stats import Filters, apply_filters, reward_per_step, rollout_frame, zero_advantage_share
from rigs.patience import backstop

APP = str(Path(__file__).resolve().parents[2] / "air" / "visualize.py")
RUNS = {"20261125-010203-aaaaaa": 1.0, "20261125-010203-bbbbbb": 0.0, "20261125-010204-cccccc": 0.5}


def _record(run: str, member: int, reward: float) -> TrajectoryRecord:
    started = datetime(2026, 11, 25, 1, 2, 3, tzinfo=UTC) + timedelta(seconds=member)
    return TrajectoryRecord(
        id=hashlib.sha1(f"{run}/{member}".encode()).hexdigest(),
        task="laneMerge",
        group_id="1-0",
        step=1,
        policy="noisy",
        started_at=started,
        exit_status="submitted",
        baseline=BaselineInfo(metric="Score", score=0.0),
        reward=reward,
    )


@pytest.fixture
def standalone(tmp_path: Path) -> Path:
    """outputs/standalone with three run folders whose step 1 holds one group `1-0` of 4, every
    rollout of a run rewarded alike: three zero-advantage groups (pooled: one group that varies)."""
    root = tmp_path / "outputs" / "standalone"
    for run, reward in RUNS.items():
        for member in range(4):
            write_trajectory(_record(run, member, reward), root / run / "trajectories")
        (root / run / "summary.json").write_text("{}")
        (root / run / "steps.jsonl").write_text("{}\n")
    return root


def test_each_rollout_knows_its_run_and_groups_stay_apart(standalone: Path) -> None:
    index = TrajectoryIndex(standalone).refresh()
    assert not index.problems
    frame = rollout_frame(index.rollouts)
    assert sorted(frame["run"].unique()) == sorted(RUNS)
    zero = zero_advantage_share(frame)
    assert zero.to_dict("records") == [{"step": 1, "groups": 3, "zero_advantage": 3, "share": 1.0}]
    per_step = reward_per_step(frame).sort_values("run")
    assert list(per_step["reward"]) == [RUNS[r] for r in sorted(RUNS)] and set(per_step["rollouts"]) == {4}
    one = apply_filters(frame, Filters(runs=["20261125-010203-bbbbbb"]))
    assert len(one) == 4 and set(one["reward"]) == {0.0}


@pytest.mark.parametrize(
    ("opened", "expected"),
    [
        ("outputs/standalone", "20261125-010203-aaaaaa"),  # a folder of runs
        ("outputs/standalone/20261125-010203-aaaaaa", "20261125-010203-aaaaaa"),  # one run's folder
        ("outputs/standalone/20261125-010203-aaaaaa/trajectories", "20261125-010203-aaaaaa"),
        ("outputs", "standalone/20261125-010203-aaaaaa"),
    ],
)
def test_the_run_is_named_alike_however_the_folder_is_opened(tmp_path: Path, opened: str, expected: str) -> None:
    path = tmp_path / "outputs/standalone/20261125-010203-aaaaaa/trajectories/laneMerge/x.json"
    assert run_of(path, tmp_path / opened) == expected


def test_prime_rls_output_folder_is_one_run(tmp_path: Path) -> None:
    path = tmp_path / "outputs/trajectories/titanic/x.json"
    assert run_of(path, tmp_path / "outputs") == "outputs"
    assert run_of(path, tmp_path / "outputs/trajectories") == "outputs"


def test_wandb_files_are_not_unreadable_trajectories_but_a_broken_one_is(standalone: Path) -> None:
    run = standalone / "20261125-010203-aaaaaa"
    files = run / "wandb" / "offline-run-20261125_010203-abc" / "files"
    (files / "media" / "table").mkdir(parents=True)
    (files / "wandb-summary.json").write_text(json.dumps({"reward": 1.0}))
    (files / "wandb-metadata.json").write_text(json.dumps({"os": "Linux"}))
    (files / "media" / "table" / "rollouts_1_0123abcd.table.json").write_text(json.dumps({"columns": ["a"]}))
    (run / "trajectories" / "laneMerge" / "20261125-010203-broken.json").write_text("{not json")
    index = TrajectoryIndex(standalone).refresh()
    assert [p.key for p in index.problems] == [
        "20261125-010203-aaaaaa/trajectories/laneMerge/20261125-010203-broken.json"
    ]
    assert len(index.rollouts) == 12
    # Opened on the wandb folder itself, W&B's files are still not ours.
    assert TrajectoryIndex(files).refresh().problems == []


def test_the_viewer_shows_a_run_column_and_filters_by_run(standalone: Path, monkeypatch) -> None:
    monkeypatch.setenv("AIR_TRAJECTORY_DIR", str(standalone))
    at = AppTest.from_file(APP, default_timeout=backstop(60))
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert sorted(set(at.dataframe[0].value["run"])) == sorted(RUNS)
    at.multiselect(key="filter_runs").set_value(["20261125-010204-cccccc"])
    at.run()
    assert not at.exception, [e.value for e in at.exception]
    assert set(at.dataframe[0].value["run"]) == {"20261125-010204-cccccc"}
    assert len(at.dataframe[0].value) == 4
