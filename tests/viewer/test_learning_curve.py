"""A prime-rl run's learning curve (air/viewer/learning.py): the series per step from metrics.jsonl, the same
from the trajectories when the file is missing or lacks a series, and a run folder as the viewer's index sees
it (its configs and weights are not trajectories). The expected numbers are written out by hand from
rigs.synthetic_runs.rl_rollout's plan: step s of 4 rollouts of 4 turns, 4 - s format errors, s + 1 scored."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from air.viewer.index import TrajectoryIndex
from air.viewer.learning import StepRow, learning_curve, learning_table, read_step_metrics, series_order
from air.viewer.rl_run import find_rl_runs, format_error_penalty, run_label, trajectory_folders
from air.viewer.stats import format_error_rate, rollout_frame
from rigs.synthetic_runs import RL_RUN, write_rl_run, write_synthetic_run

STEPS = [0, 1, 2, 3]
VALID = [0.75, 0.8125, 0.875, 0.9375]  # 1 - (4 - s) / 16
VALIDATED = [0.25, 0.5, 0.75, 1.0]  # (s + 1) / 4
SCORE = [1.1, 1.205, 1.31, 1.415]  # 1 + 0.1 (s + 1) + 0.005 s
PENALTY = [0.05, 0.0375, 0.025, 0.0125]  # (4 - s) / 4 x 0.05
# step 0: one scored rollout (+0.1 - 0.05) and three unscored (-1.1 - 0.05): (0.05 - 3.45) / 4
REWARD = [-0.85, -0.485, -0.0675, 0.4025]


def _check(rows: list[StepRow], source: str) -> None:
    assert [r.step for r in rows] == STEPS  # the line cut short at the end is not a step
    assert [r.rollouts for r in rows] == [4] * 4
    assert [r.valid_share for r in rows] == pytest.approx(VALID)
    assert [r.validate_share for r in rows] == pytest.approx(VALIDATED)
    assert [r.task_scores.keys() for r in rows] == [{"laneMerge"}] * 4
    assert [r.task_scores["laneMerge"] for r in rows] == pytest.approx(SCORE)
    assert [r.format_penalty for r in rows] == pytest.approx(PENALTY)
    assert [r.reward for r in rows] == pytest.approx(REWARD)
    assert {r.source for r in rows} == {source}


def test_the_series_per_step_come_from_metrics_jsonl(tmp_path: Path) -> None:
    run = write_rl_run(tmp_path / "out")
    _check(learning_curve(run), "metrics.jsonl")


def test_the_same_series_come_from_the_trajectories_when_there_is_no_metrics_file(tmp_path: Path) -> None:
    """prime-rl c87c19b writes no metrics.jsonl; its trajectories carry their step. They are found where the
    configs' (absolute) trajectory_dir puts them, outside the run folder."""
    run = write_rl_run(tmp_path / "out", trajectory_dir=tmp_path / "trajectories", metrics=False)
    assert trajectory_folders(run) == [run, (tmp_path / "trajectories").resolve()]
    _check(learning_curve(run), "trajectories")


def test_metrics_jsonl_wins_and_the_trajectories_fill_the_series_it_lacks(tmp_path: Path) -> None:
    run = write_rl_run(tmp_path / "out", trajectory_dir=tmp_path / "trajectories", metrics=False)
    lines = [{"step": s, "train/agg/all/player/reward/mean": 10.0 + s} for s in STEPS]
    (run / "metrics.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    rows = learning_curve(run)
    assert [r.reward for r in rows] == [10.0, 11.0, 12.0, 13.0]
    assert [r.valid_share for r in rows] == pytest.approx(VALID)
    assert [r.task_scores["laneMerge"] for r in rows] == pytest.approx(SCORE)
    assert {r.source for r in rows} == {"metrics.jsonl+trajectories"}


def test_a_step_only_one_source_has_keeps_its_own_numbers(tmp_path: Path) -> None:
    run = write_rl_run(tmp_path / "out", trajectory_dir=tmp_path / "trajectories", metrics=False)
    (run / "metrics.jsonl").write_text(json.dumps({"step": 9, "train/agg/all/player/reward/mean": 0.5}) + "\n")
    rows = learning_curve(run)
    assert [r.step for r in rows] == [*STEPS, 9]
    assert rows[-1] == StepRow(9, None, 0.5, None, None, None, {}, "metrics.jsonl")


def test_the_penalty_is_the_envs_default_where_the_configs_do_not_name_it(tmp_path: Path) -> None:
    run = write_rl_run(tmp_path / "out")
    shutil.rmtree(run / "configs")
    assert format_error_penalty(run) is None
    assert [r.format_penalty for r in learning_curve(run)] == pytest.approx([0.02 * (4 - s) / 4 for s in STEPS])
    assert [r.format_penalty for r in learning_curve(run, penalty=1.0)] == pytest.approx([1.0, 0.75, 0.5, 0.25])


def test_task_scores_count_each_envs_own_scored_rollouts() -> None:
    """Two envs, one task each: an unscored rollout reports its baseline, so the score among scored rollouts
    is (final - (1 - scored) * baseline) / scored with that env's scored share, not the aggregate's."""
    metric = "train/{}/all/player/metrics/{}/mean".format
    values = {
        metric("a", "scored"): 0.5, metric("a", "taskA/final_score"): 1.5, metric("a", "taskA/baseline_score"): 1.0,
        metric("b", "scored"): 1.0, metric("b", "taskB/final_score"): 3.0, metric("b", "taskB/baseline_score"): 2.0,
        metric("agg", "scored"): 0.75, metric("agg", "taskA/final_score"): 1.5,
        metric("agg", "taskA/baseline_score"): 1.0, metric("agg", "turns"): 4.0, metric("agg", "format_errors"): 1.0,
        "train/agg/all/player/reward/mean": 0.25,
    }  # fmt: skip
    (row,) = learning_curve(Path("/nonexistent"), [], metrics={3: values}, penalty=0.1)
    assert row.task_scores == {"taskA": 2.0, "taskB": 3.0}
    assert (row.reward, row.valid_share, row.validate_share, row.format_penalty) == (0.25, 0.75, 0.75, 0.1)


def test_another_agent_name_is_read_when_it_is_the_only_one(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    lines = [{"step": 0, "train/agg/all/solver/reward/mean": 0.3, "train/agg/all/solver/reward/max": 1.0}]
    path.write_text(json.dumps(lines[0]) + "\nnot json\n[1, 2]\n" + json.dumps({"step": "x"}) + "\n")
    metrics = read_step_metrics(path)
    assert metrics == {0: {"train/agg/all/solver/reward/mean": 0.3}}  # only what the curve reads
    assert learning_curve(tmp_path, [], metrics=metrics)[0].reward == 0.3


def test_the_valid_share_of_a_standalone_run_matches_the_overviews_format_error_rate(tmp_path: Path) -> None:
    """Not an rl run: the function reads any run folder's trajectories; the overview's own per-step table agrees."""
    write_synthetic_run(tmp_path / "run" / "trajectories", 96, seed=5)
    rows = learning_curve(tmp_path / "run")
    rate = format_error_rate(rollout_frame(TrajectoryIndex(tmp_path / "run").refresh().rollouts))
    assert [r.step for r in rows] == list(rate["step"]) == [0, 1, 2]
    assert [r.valid_share for r in rows] == pytest.approx(list(1 - rate["rate"]))
    assert all(r.source == "trajectories" and r.rollouts == 32 for r in rows)


def test_an_rl_run_folder_is_found_and_its_own_files_are_not_trajectories(tmp_path: Path) -> None:
    """Its configs (JSON) and broadcast weights (config.json) would be 'unreadable trajectories'; a trajectory
    folder inside the run is still read."""
    run = write_rl_run(tmp_path / "learn" / "rl", trajectory_dir=tmp_path / "learn" / "rl" / RL_RUN / "trajectories")
    index = TrajectoryIndex(run).refresh()
    assert index.problems == [] and len(index.rollouts) == 16
    assert {Path(r.path).parent.parent.name for r in index.rollouts} == {"trajectories"}
    for opened in (run, tmp_path / "learn" / "rl", tmp_path / "learn", tmp_path):
        assert find_rl_runs(opened) == [run]
        assert TrajectoryIndex(opened).refresh().problems == []
    assert find_rl_runs(tmp_path, depth=2) == []
    assert run_label(run, run) == RL_RUN and run_label(run, tmp_path / "learn") == f"rl/{RL_RUN}"
    # a folder named like prime-rl's own, outside a run folder, is read as before
    write_synthetic_run(tmp_path / "other" / "logs", 8)
    assert len(TrajectoryIndex(tmp_path / "other").refresh().rollouts) == 8


def test_the_charts_table_has_one_panel_per_series_in_order(tmp_path: Path) -> None:
    rows = learning_curve(write_rl_run(tmp_path / "out"))
    table = learning_table({"run-a": rows, "run-b": rows[:2]})
    assert series_order(table) == [
        "mean reward",
        "valid-command share",
        "task score: laneMerge",
        "validate share",
        "format penalty",
    ]
    assert len(table) == 5 * (4 + 2)
    valid = table[(table["series"] == "valid-command share") & (table["run"] == "run-a")]
    assert list(valid["step"]) == STEPS and list(valid["value"]) == pytest.approx(VALID)
    assert learning_table({"empty": []}).empty
