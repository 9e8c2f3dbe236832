"""Trajectory records: atomic writes, round trips, MLGym's run folders, errors that name the file."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from air.env.trajectories import (
    SCHEMA_VERSION,
    BaselineInfo,
    TrajectoryError,
    TrajectoryRecord,
    Turn,
    TurnEvaluation,
    summary_metrics,
    write_trajectory,
)
from air.env.trajectory_reader import (
    iter_trajectory_paths,
    load_trajectory,
    parse_mlgym_run_name,
    read_mlgym_run,
    read_mlgym_traj,
    recorded_commands,
    recorded_scores,
)
from rigs.mlgym_runs import RUN_NAME, write_mlgym_run
from rigs.mlgym_runs import mlgym_scored as _scored
from rigs.mlgym_runs import mlgym_step as _step


def make_record(**overrides) -> TrajectoryRecord:
    submit_eval = TurnEvaluation(status="ok", score=0.91, metrics={"accuracy": 0.91}, duration_s=1.5, kind="submit")
    fields = dict(
        id="3f2a9c0d1e4b5a6978877665",
        task="toyGrid",
        task_id="toyGridWorld",
        example_id=2,
        group_id="g-17",
        step=4,
        model="tiny-lm",
        sampling_args={"temperature": 0.6, "max_tokens": 512},
        env_settings={"max_turns": 8},
        system_prompt="You are careful.",
        task_prompt="Make the grid agent reach the goal. Ünïcödé ✓ 日本語",
        started_at=datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC),
        finished_at=datetime(2025, 3, 4, 5, 9, 0, tzinfo=UTC),
        duration_s=173.0,
        exit_status="submitted",
        baseline=BaselineInfo(metric="accuracy", score=0.5, metrics={"accuracy": 0.5}),
        final_evaluation=submit_eval,
        reward=0.41,
        advantage=-0.1,
        metrics={"turns": 4.0},
        turns=[
            Turn(
                index=1, model_text="look first\n```\nls -la\n```", command="ls -la", output="a.py\nb.csv", exit_code=0
            ),
            Turn(index=2, model_text="two blocks", command=None, format_error="expected exactly one code block"),
            Turn(
                index=3,
                model_text="```\nvalidate\n```",
                command="validate",
                output="score 0.8",
                evaluation=TurnEvaluation(status="ok", score=0.8, metrics={"accuracy": 0.8}),
                step_reward=0.3,
            ),
            Turn(index=4, model_text="```\nsubmit\n```", command="submit", evaluation=submit_eval, step_reward=0.11),
        ],
    )
    fields.update(overrides)
    return TrajectoryRecord(**fields)


# --- our files -----------------------------------------------------------------------------------


def test_write_then_load_gives_the_same_record(tmp_path: Path) -> None:
    record = make_record()
    path = write_trajectory(record, tmp_path / "runs")
    assert path == tmp_path / "runs" / "toyGrid" / "20250304-050607-3f2a9c0d1e4b.json"
    assert load_trajectory(path) == record
    text = path.read_text(encoding="utf-8")
    assert "日本語" in text  # non-ASCII written as itself, not escaped
    assert json.loads(text)["schema_version"] == SCHEMA_VERSION
    assert not [p for p in path.parent.iterdir() if p != path]  # no temp file left behind


_text = st.text(max_size=200)  # hypothesis' text never holds lone surrogates
_score = st.one_of(st.none(), st.floats(allow_nan=False, allow_infinity=False))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    texts=st.lists(st.tuples(_text, st.one_of(st.none(), _text), _text), max_size=5),
    scores=st.lists(_score, max_size=5),
    exit_status=_text,
)
def test_round_trip_of_arbitrary_text_and_scores(tmp_path: Path, texts, scores, exit_status) -> None:
    turns = [Turn(index=i + 1, model_text=m, command=c, output=o) for i, (m, c, o) in enumerate(texts)]
    for turn, score in zip(turns, scores, strict=False):
        turn.evaluation = TurnEvaluation(status="ok", score=score, metrics={"m": score})
    record = make_record(turns=turns, exit_status=exit_status, final_evaluation=None)
    assert load_trajectory(write_trajectory(record, tmp_path)) == record


def test_nan_scores_and_lone_surrogates_survive_writing(tmp_path: Path) -> None:
    record = make_record(final_evaluation=TurnEvaluation(status="ok", score=math.nan, metrics={"loss": math.inf}))
    record.turns[0].output = "bad byte: \udcff end"  # what a surrogateescape decode leaves behind
    loaded = load_trajectory(write_trajectory(record, tmp_path))
    assert math.isnan(loaded.final_evaluation.score)
    assert loaded.final_evaluation.metrics == {"loss": math.inf}
    assert loaded.turns[0].output == "bad byte: ? end"


def test_a_failed_serialisation_leaves_no_file(tmp_path: Path) -> None:
    record = make_record(sampling_args={"callback": object()})  # not JSON
    with pytest.raises(TrajectoryError, match="cannot be written"):
        write_trajectory(record, tmp_path)
    assert list(tmp_path.rglob("*")) == []


def test_a_record_broken_after_construction_is_not_written(tmp_path: Path) -> None:
    record = make_record()
    record.turns[0].index = "first"  # assignment is not validated by pydantic
    with pytest.raises(TrajectoryError, match=r"turns\[0\]\.index"):
        write_trajectory(record, tmp_path)
    assert list(tmp_path.rglob("*.json")) == []


@pytest.mark.parametrize("failing", ["fsync", "replace"])
def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp_file(tmp_path: Path, monkeypatch, failing) -> None:
    old = make_record()
    path = write_trajectory(old, tmp_path)
    old_bytes = path.read_bytes()

    def fail(*args, **kwargs):
        raise OSError(f"simulated {failing} failure")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(OSError, match="simulated"):
        write_trajectory(make_record(exit_status="max_turns", reward=-1.0), tmp_path)
    monkeypatch.undo()
    assert path.read_bytes() == old_bytes
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]


def test_unsafe_task_names_and_ids_are_refused() -> None:
    with pytest.raises(ValueError, match="task"):
        make_record(task="../escape")
    with pytest.raises(ValueError, match="id"):
        make_record(id="a/b")


def test_unknown_keys_are_ignored_on_read(tmp_path: Path) -> None:
    data = json.loads(make_record().model_dump_json())
    data["added_in_a_later_version"] = {"x": 1}
    data["turns"][0]["new_turn_field"] = 3
    data["final_evaluation"]["new_eval_field"] = "y"
    data["baseline"]["new_baseline_field"] = True
    path = tmp_path / "future.json"
    path.write_text(json.dumps(data))
    assert load_trajectory(path) == make_record()


def _corrupt(data: dict, how: str) -> str:
    if how == "missing exit_status":
        del data["exit_status"]
    elif how == "index not an int":
        data["turns"][1]["index"] = "second"
    elif how == "turns not a list":
        data["turns"] = "many"
    elif how == "score not a number":
        data["final_evaluation"]["score"] = "high"
    elif how == "newer schema":
        data["schema_version"] = SCHEMA_VERSION + 1
    return json.dumps(data)


@pytest.mark.parametrize(
    ("how", "named"),
    [
        ("missing exit_status", "missing field"),
        ("index not an int", r"turns\[1\]\.index"),
        ("turns not a list", "turns"),
        ("score not a number", r"final_evaluation\.score"),
        ("newer schema", "schema version"),
    ],
)
def test_malformed_records_name_the_file_and_the_field(tmp_path: Path, how: str, named: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(_corrupt(json.loads(make_record().model_dump_json()), how))
    with pytest.raises(TrajectoryError, match=named) as info:
        load_trajectory(path)
    assert str(path) in str(info.value)
    if how == "missing exit_status":
        assert "exit_status" in str(info.value)


@pytest.mark.parametrize(
    ("content", "named"),
    [
        (b"", "empty"),
        (b"  \n", "empty"),
        (b'{"id": "ab",', "invalid JSON"),
        (b"[1, 2]", "top level"),
        (b"\xff\xfe", "invalid JSON"),
    ],
)
def test_unreadable_files_name_the_file(tmp_path: Path, content: bytes, named: str) -> None:
    path = tmp_path / "broken.json"
    path.write_bytes(content)
    with pytest.raises(TrajectoryError, match=named) as info:
        load_trajectory(path)
    assert str(path) in str(info.value)


def test_recorded_commands_skip_format_errors_and_missing_commands(tmp_path: Path) -> None:
    record = make_record()
    record.turns.append(Turn(index=5, model_text="bad", command="rm -rf x", format_error="two blocks"))
    record.turns.append(Turn(index=6, model_text="nothing", command="   "))
    path = write_trajectory(record, tmp_path)
    assert recorded_commands(path) == ["ls -la", "validate", "submit"]
    assert recorded_commands(record) == ["ls -la", "validate", "submit"]


def test_recorded_scores_count_a_submit_once_and_keep_a_separate_final() -> None:
    record = make_record()  # the submit's evaluation is also the final one
    assert recorded_scores(record) == [0.8, 0.91]
    final = TurnEvaluation(status="ok", score=0.7, metrics={"accuracy": 0.7}, kind="final")
    assert recorded_scores(make_record(turns=make_record().turns[:3], final_evaluation=final)) == [0.8, 0.7]
    failed = TurnEvaluation(status="evaluation_failed", score=None, metrics=None, error="boom", kind="final")
    assert recorded_scores(make_record(turns=make_record().turns[:3], final_evaluation=failed)) == [0.8, None]


def test_summary_metrics_follow_the_metric_direction() -> None:
    record = make_record()
    metrics = summary_metrics(record)
    assert metrics["turns"] == 4 and metrics["validates"] == 1 and metrics["format_errors"] == 1
    assert metrics["best_score"] == 0.91 and metrics["improvement"] == pytest.approx(0.41)
    lower = make_record(baseline=BaselineInfo(metric="loss", score=1.0, higher_is_better=False))
    metrics = summary_metrics(lower)
    assert metrics["best_score"] == 0.8 and metrics["improvement"] == pytest.approx(0.09)


def test_suspicious_evaluations_are_counted_for_the_viewer(tmp_path) -> None:
    from air.viewer.index import summarise

    forged = TurnEvaluation(status="suspicious", score=None, metrics={"accuracy": 99.0}, error="out of range")
    record = make_record()
    assert summary_metrics(record)["suspicious_evaluations"] == 0
    record.turns[2].evaluation = forged
    assert summary_metrics(record)["suspicious_evaluations"] == 1
    assert summarise(record, tmp_path / "r.json", tmp_path).suspicious_evaluations == 1


# --- MLGym's format (fixtures written from scratch in the documented structure) ------------------


def test_an_mlgym_run_folder_loads_with_task_model_turns_and_scores(tmp_path: Path) -> None:
    folder = write_mlgym_run(tmp_path)
    record = load_trajectory(folder)
    assert (record.source, record.task, record.task_id) == ("mlgym", "mazeRunner", "mazeRunner")
    assert record.model == "acme-tiny-7b"
    assert record.sampling_args == {"temperature": 0.7, "top_p": 0.9}
    assert record.env_settings == {"config": "plain", "cost_limit": 2.5, "install": 0, "suffix": "nightly", "run": 3}
    assert record.exit_status == "submitted"
    assert record.system_prompt == "You solve mazes in a shell."
    assert record.task_prompt == "Make solver.py find shorter paths."
    assert [t.index for t in record.turns] == [1, 2, 3, 4, 5, 6, 7]
    assert record.turns[2].timed_out and record.turns[2].duration_s == 9.0
    assert record.turns[0].output == "maze.py\nsolver.py"
    assert record.turns[0].model_text.startswith("Next I will run this.")
    # "steps", the baseline's first key, names none of the lower-is-better words: higher is better
    assert (record.baseline.metric, record.baseline.score, record.baseline.higher_is_better) == ("steps", 40.0, True)
    evaluations = [t.evaluation.status if t.evaluation else None for t in record.turns]
    assert evaluations == [None, None, None, "ok", "ok", "evaluation_format_error", "ok"]
    assert recorded_scores(record) == [35.0, 31.0, None, 30.0]
    assert record.final_evaluation.kind == "submit" and record.final_evaluation.score == 30.0
    assert record.turns[-1].evaluation == record.final_evaluation
    assert record.metrics["validates"] == 3 and record.metrics["timeouts"] == 1
    assert record.metrics["best_score"] == 35.0 and record.metrics["improvement"] == pytest.approx(-10.0)
    assert record.source_info["model_stats"]["api_calls"] == 7
    # the same run read through its .traj file, with or without results.json
    assert load_trajectory(folder / "mazeRunner.traj") == record
    assert read_mlgym_traj(folder / "mazeRunner.traj", json.loads((folder / "results.json").read_text())) == record
    alone = read_mlgym_traj(folder / "mazeRunner.traj")
    assert alone.baseline.metrics == {"steps": 40.0, "solved": 0.5}  # read from the validate output
    assert recorded_scores(alone) == recorded_scores(record)


def test_lower_is_better_metrics_and_an_autosubmission_at_the_step_limit(tmp_path: Path) -> None:
    steps = [
        _step("validate submission.csv\n", _scored({"val_loss": 3.5})),
        _step("validate\n", "Exited (max_steps)"),  # the episode ended before it ran
    ]
    scores = [{"val_loss": 3.5}, {"val_loss": 3.2}]
    folder = write_mlgym_run(
        tmp_path, steps=steps, scores=scores, baseline={"val_loss": 4.0}, exit_status="autosubmission (max_steps)"
    )
    record = read_mlgym_run(folder)
    assert record.baseline.metric == "val_loss" and not record.baseline.higher_is_better
    assert record.final_evaluation.kind == "final" and record.turns[-1].evaluation is None
    assert recorded_scores(record) == [3.5, 3.2]
    assert record.metrics["best_score"] == 3.2 and record.metrics["improvement"] == pytest.approx(0.8)


@pytest.mark.parametrize(
    ("exit_status", "status"),
    [
        ("evaluation_format_error (submit)", "evaluation_format_error"),
        ("submission_not_found (submit)", "submission_not_found"),
    ],
)
def test_a_failed_submission_becomes_the_final_evaluation(tmp_path: Path, exit_status: str, status: str) -> None:
    steps = [_step("ls\n", "x"), _step("submit\n", "")]
    record = load_trajectory(write_mlgym_run(tmp_path, steps=steps, scores=[], exit_status=exit_status))
    assert record.final_evaluation.status == status and record.final_evaluation.score is None
    assert record.turns[-1].evaluation == record.final_evaluation
    assert record.exit_status == exit_status


def test_mlgym_exit_pseudo_actions_are_not_commands(tmp_path: Path) -> None:
    steps = [_step("ls\n", "x"), _step("cat a.txt\n", "hello"), _step("exit_context", "Exited (exit_context)")]
    folder = write_mlgym_run(tmp_path, steps=steps, scores=[], exit_status="submission_not_found (exit_context)")
    assert recorded_commands(folder) == ["ls\n", "cat a.txt\n"]  # MLGym's raw actions
    assert load_trajectory(folder).final_evaluation.kind == "final"


def test_an_mlgym_run_without_its_traj_keeps_the_scores(tmp_path: Path) -> None:
    folder = write_mlgym_run(tmp_path, scores=[{"steps": 38.0}, {"steps": 33.0}])
    (folder / "mazeRunner.traj").unlink()
    record = load_trajectory(folder)
    assert record.turns == [] and record.exit_status == "unknown" and "no .traj" in record.error
    assert record.metrics["best_score"] == 38.0 and record.source_info["scores"] == [{"steps": 38.0}, {"steps": 33.0}]


def test_run_folder_names_are_parsed() -> None:
    assert parse_mlgym_run_name(RUN_NAME)["run"] == 3
    plain = parse_mlgym_run_name("m__t__c__t-0.00__p-1.00__c-0.50__install-1_run_0")
    assert plain is not None and plain["suffix"] is None and plain["install"] == 1
    assert parse_mlgym_run_name("20250304-050607-3f2a9c0d1e4b") is None


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda t: t.update(trajectory="not a list"), "trajectory"),
        (lambda t: t["trajectory"][0].update(execution_time="slow"), r"trajectory\[0\]\.execution_time"),
        (lambda t: t["trajectory"][1].pop("action"), r"trajectory\[1\]\.action"),
        (lambda t: t.pop("trajectory"), "missing field"),
        (lambda t: t["info"].update(score={"a": 1}), r"info\.score"),
    ],
)
def test_malformed_traj_files_name_the_file(tmp_path: Path, mutate, named: str) -> None:
    folder = write_mlgym_run(tmp_path)
    path = folder / "mazeRunner.traj"
    traj = json.loads(path.read_text())
    mutate(traj)
    path.write_text(json.dumps(traj))
    for source in (path, folder):
        with pytest.raises(TrajectoryError, match=named) as info:
            load_trajectory(source)
        assert str(path) in str(info.value)


def test_bad_results_and_folders_that_are_not_runs_are_errors(tmp_path: Path) -> None:
    folder = write_mlgym_run(tmp_path)
    (folder / "results.json").write_text('{"agent": 5}')
    with pytest.raises(TrajectoryError, match="agent") as info:
        load_trajectory(folder)
    assert "results.json" in str(info.value)
    with pytest.raises(TrajectoryError, match="MLGym's results.json"):  # not a record of ours
        load_trajectory(write_mlgym_run(tmp_path / "other") / "results.json")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(TrajectoryError, match="no .traj"):
        load_trajectory(empty)


# --- finding trajectories ------------------------------------------------------------------------


def test_iter_trajectory_paths_finds_nested_files_and_run_folders(tmp_path: Path) -> None:
    a = write_trajectory(make_record(), tmp_path / "standalone")
    b = write_trajectory(make_record(id="beef" * 6, task="other"), tmp_path / "train" / "step_3")
    run = write_mlgym_run(tmp_path / "mlgym")
    scores_only = write_mlgym_run(tmp_path / "mlgym", name=RUN_NAME.replace("run_3", "run_4"))
    (scores_only / "mazeRunner.traj").unlink()
    (a.parent / f".{a.name}.x1y2.tmp").write_text("{")  # a write in progress
    (a.parent / "half.json.tmp").write_text("{")
    (tmp_path / "results.json").write_text("{}")  # MLGym's score file outside a run folder
    (tmp_path / ".cache").mkdir()
    (tmp_path / ".cache" / "x.json").write_text("{}")
    not_a_run = tmp_path / "notes"
    not_a_run.mkdir()
    (not_a_run / "results.json").write_text("{}")

    found = list(iter_trajectory_paths(tmp_path))
    assert found == sorted([a, b, run, scores_only])
    assert {p: load_trajectory(p).source for p in found} == {a: "air", b: "air", run: "mlgym", scores_only: "mlgym"}
    with pytest.raises(FileNotFoundError):
        iter_trajectory_paths(tmp_path / "missing")


def test_a_standalone_runs_summary_is_not_taken_for_a_trajectory(tmp_path: Path) -> None:
    path = write_trajectory(make_record(), tmp_path / "run" / "trajectories")
    (tmp_path / "run" / "summary.json").write_text('{"steps": 3}')
    assert list(iter_trajectory_paths(tmp_path)) == [path]
