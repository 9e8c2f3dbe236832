"""Tests for the built-in tasks under air/tasks/builtin (no Docker needed).

Each test lays a task out in a temporary folder the way the runtime lays it out in the
container (starter_code files by basename at the workspace root, the contents of every
dataset's data_path under data/) and runs the task's own scripts there with this interpreter.
"""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from rigs.patience import backstop

TASK_ROOT = Path(__file__).resolve().parents[2] / "air" / "tasks" / "builtin"
CONFIGS = TASK_ROOT / "configs"

CSV_TASKS = {
    # task id -> (label/target column, "classification" | "regression")
    "loanDefault": ("defaulted", "classification"),
    "buildingEnergy": ("annual_energy_mwh", "regression"),
}
GAME_TASKS = ["laneMerge"]
ONE_NUMBER_TASKS = ["ridgePenalty"]  # a CSV task whose submission is one number: tests/tasks/test_ridge_penalty.py
ALL_TASKS = [*CSV_TASKS, *GAME_TASKS, *ONE_NUMBER_TASKS]

TASK_KEYS = {
    "id",
    "name",
    "description",
    "dataset_configs",
    "task_entrypoint",
    "training_timeout",
    "use_generic_conda",
    "starter_code",
    "baseline_paths",
    "baseline_scores",
    "sample_submission",
    "evaluation_paths",
    "evaluation_read_only",
    "secret_files",
}
DATASET_KEYS = {"name", "description", "data_path", "is_local"}
SUBPROCESS_TIMEOUT = backstop(120)


# ----------------------------------------------------------------------------- helpers


def load_task(task_id: str) -> dict:
    return yaml.safe_load((CONFIGS / "tasks" / f"{task_id}.yaml").read_text())


def load_dataset(rel_path: str) -> dict:
    return yaml.safe_load((CONFIGS / rel_path).read_text())


def lay_out(task_id: str, workspace: Path) -> Path:
    """Copy what the runtime would put into /home/agent/workspace for this task."""
    task = load_task(task_id)
    workspace.mkdir(parents=True, exist_ok=True)
    for rel in task["starter_code"]:
        if (TASK_ROOT / rel).is_dir():  # a folder is laid out under its own name, as the runtime walks it
            shutil.copytree(TASK_ROOT / rel, workspace / Path(rel).name, dirs_exist_ok=True)
        else:
            shutil.copy2(TASK_ROOT / rel, workspace / Path(rel).name)
    for rel in task["dataset_configs"]:
        dataset = load_dataset(rel)
        shutil.copytree(TASK_ROOT / dataset["data_path"], workspace / "data", dirs_exist_ok=True)
    return workspace


def run_script(workspace: Path, script: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, script, *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )


def evaluate(task_id: str, workspace: Path, submission: Path | None = None) -> subprocess.CompletedProcess:
    if task_id in CSV_TASKS:
        submission = submission if submission is not None else workspace / "submission.csv"
        return run_script(workspace, "evaluate.py", "--submission_file", str(submission))
    return run_script(workspace, "evaluate.py")


def evaluate_in_process(task_id: str, workspace: Path, submission: Path) -> subprocess.CompletedProcess:
    """Like evaluate() for a CSV task, but without paying for a new interpreter (pandas imports slowly)."""
    args = [str(workspace / "evaluate.py"), "--submission_file", str(submission)]
    stdout, stderr = io.StringIO(), io.StringIO()
    saved_argv = sys.argv
    returncode = 0
    try:
        sys.argv = args
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            runpy.run_path(args[0], run_name="__main__")
    except SystemExit as exc:
        returncode = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.argv = saved_argv
    return subprocess.CompletedProcess(args, returncode, stdout.getvalue(), stderr.getvalue())


def metrics_of(result: subprocess.CompletedProcess) -> dict:
    assert result.returncode == 0, f"evaluate.py failed:\n{result.stderr}"
    stdout = result.stdout.strip()
    assert stdout.count("\n") == 0, f"stdout must be a single JSON object, got:\n{result.stdout}"
    metrics = json.loads(stdout)
    assert isinstance(metrics, dict) and metrics
    assert all(isinstance(v, float | int) for v in metrics.values()), metrics
    return metrics


def assert_fails_cleanly(result: subprocess.CompletedProcess, *fragments: str) -> None:
    assert result.returncode != 0, f"expected a failure, got stdout {result.stdout!r}"
    assert result.stdout.strip() == "", f"nothing may be printed on stdout on failure: {result.stdout!r}"
    assert "Evaluation error" in result.stderr, result.stderr
    for fragment in fragments:
        assert fragment in result.stderr, f"{fragment!r} not in stderr:\n{result.stderr}"


def primary(task_id: str) -> tuple[str, float]:
    name, value = next(iter(load_task(task_id)["baseline_scores"][0].items()))
    return name, value


# ----------------------------------------------------------------------------- configs


@pytest.mark.parametrize("task_id", ALL_TASKS)
def test_task_config_is_well_formed(task_id, tmp_path):
    task = load_task(task_id)
    assert set(task) <= TASK_KEYS, set(task) - TASK_KEYS
    assert task["id"] == task_id
    assert isinstance(task["name"], str) and task["name"]
    csv = task_id in CSV_TASKS or task_id in ONE_NUMBER_TASKS
    assert task["task_entrypoint"] == ("CSVSubmissionTasks" if csv else "PythonSubmissionTasks")
    assert isinstance(task["training_timeout"], int) and task["training_timeout"] > 0
    assert task["use_generic_conda"] is True
    assert task["evaluation_read_only"] is True
    assert task["evaluation_paths"] == ["evaluate.py"]
    assert len(task["baseline_scores"]) == 1
    assert all(isinstance(v, float) for v in task["baseline_scores"][0].values())

    # The only braces in a description may be the {dataset_docs} placeholder.
    description = task["description"]
    assert "{" not in description.replace("{dataset_docs}", "")
    assert "}" not in description.replace("{dataset_docs}", "")
    if task["dataset_configs"]:
        assert "{dataset_docs}" in description
        description.format(dataset_docs="docs")

    for rel in task["starter_code"]:
        assert (TASK_ROOT / rel).exists(), rel  # a file, or a folder laid out under its own name
    if "sample_submission" in task:
        assert (TASK_ROOT / task["sample_submission"]).is_file()
    for rel in task["dataset_configs"]:
        dataset = load_dataset(rel)
        assert set(dataset) == DATASET_KEYS
        assert dataset["is_local"] is True
        assert (TASK_ROOT / dataset["data_path"]).is_dir()
        assert "{" not in dataset["description"] and "}" not in dataset["description"]

    workspace = lay_out(task_id, tmp_path / "ws")
    for rel in [*task["baseline_paths"], *task["evaluation_paths"], *task["secret_files"]]:
        assert (workspace / rel).is_file(), f"{rel} is not in the laid-out workspace"
    # The agent never sees the generators.
    assert not any(p.name.startswith("generator") for p in workspace.rglob("*"))


def test_every_config_is_tested():
    assert sorted(p.stem for p in (CONFIGS / "tasks").glob("*.yaml")) == sorted(ALL_TASKS)


# ----------------------------------------------------------------------------- CSV tasks


@pytest.mark.parametrize("task_id", list(CSV_TASKS))
def test_generator_reproduces_committed_data(task_id, tmp_path):
    (dataset_rel,) = load_task(task_id)["dataset_configs"]
    committed = TASK_ROOT / load_dataset(dataset_rel)["data_path"]
    out = tmp_path / "regenerated"
    result = subprocess.run(
        [sys.executable, str(TASK_ROOT / "generators" / f"{task_id}.py"), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in committed.iterdir())
    assert names == ["answer.csv", "test.csv", "train.csv"]
    assert sorted(p.name for p in out.iterdir()) == names
    for name in names:
        assert (out / name).read_bytes() == (committed / name).read_bytes(), f"{name} differs"
        assert (committed / name).stat().st_size < 200_000


@pytest.mark.parametrize("task_id", list(CSV_TASKS))
def test_data_files_are_consistent(task_id, tmp_path):
    label, kind = CSV_TASKS[task_id]
    workspace = lay_out(task_id, tmp_path / "ws")
    train = pd.read_csv(workspace / "data" / "train.csv")
    test = pd.read_csv(workspace / "data" / "test.csv")
    answer = pd.read_csv(workspace / "data" / "answer.csv")
    sample = pd.read_csv(workspace / "sample_submission.csv")
    assert label in train.columns and label not in test.columns
    assert list(train.columns) == [*test.columns, label]
    assert list(answer.columns) == ["id", label] == list(sample.columns)
    assert answer["id"].tolist() == test["id"].tolist() == sample["id"].tolist()
    assert not set(train["id"]) & set(test["id"])
    assert train.isna().any().any(), "the dataset is meant to have some missing values"
    assert any(not pd.api.types.is_numeric_dtype(train[c]) for c in train.columns), "some columns are categorical"
    if kind == "classification":
        assert set(train[label].unique()) == {0, 1}
        assert set(answer[label].unique()) == {0, 1}
    # The sample submission is valid.
    metrics_of(evaluate(task_id, workspace, workspace / "sample_submission.csv"))


@pytest.mark.parametrize("task_id", list(CSV_TASKS))
def test_baseline_reproduces_recorded_score(task_id, tmp_path):
    task = load_task(task_id)
    workspace = lay_out(task_id, tmp_path / "ws")
    (baseline,) = task["baseline_paths"]
    result = run_script(workspace, baseline)
    assert result.returncode == 0, result.stderr
    assert (workspace / "submission.csv").is_file()
    metrics = metrics_of(evaluate(task_id, workspace))
    expected = task["baseline_scores"][0]
    assert list(metrics) == list(expected), "primary metric must come first, in the same order"
    for name, value in expected.items():
        assert metrics[name] == pytest.approx(value, abs=1e-4), name


@pytest.mark.parametrize("task_id", list(CSV_TASKS))
def test_evaluate_works_from_another_cwd_and_via_runpy(task_id, tmp_path):
    """Paths are resolved relative to evaluate.py, and the runtime's runpy call works."""
    workspace = lay_out(task_id, tmp_path / "ws")
    shutil.copy2(workspace / "sample_submission.csv", workspace / "submission.csv")
    expected = metrics_of(evaluate(task_id, workspace))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    result = subprocess.run(
        [sys.executable, str(workspace / "evaluate.py"), "--submission_file", str(workspace / "submission.csv")],
        cwd=elsewhere,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert metrics_of(result) == expected
    code = (
        "import runpy, sys; sys.path.append(sys.argv[1]); "
        "sys.argv = ['evaluate.py', '--submission_file', sys.argv[2]]; "
        "runpy.run_path('evaluate.py', run_name='__main__')"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, str(workspace), str(workspace / "submission.csv")],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=SUBPROCESS_TIMEOUT,
    )
    assert metrics_of(result) == expected


def _write(frame: pd.DataFrame, path: Path) -> Path:
    frame.to_csv(path, index=False)
    return path


@pytest.mark.parametrize("task_id", list(CSV_TASKS))
def test_malformed_submissions_fail_cleanly(task_id, tmp_path):
    label, _ = CSV_TASKS[task_id]
    workspace = lay_out(task_id, tmp_path / "ws")
    good = pd.read_csv(workspace / "sample_submission.csv")

    # One check in a real subprocess, the rest in-process for speed.
    assert_fails_cleanly(evaluate(task_id, workspace, workspace / "nope.csv"), "not found")

    empty = workspace / "empty.csv"
    empty.write_text("")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, empty), "empty")

    path = _write(good.drop(columns=[label]), workspace / "no_label.csv")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, path), "missing the column", label)

    path = _write(good.rename(columns={"id": "row"}), workspace / "no_id.csv")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, path), "missing the column", "'id'")

    path = _write(good.iloc[:-1], workspace / "short.csv")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, path), "rows")

    path = _write(pd.concat([good, good.iloc[:3]]), workspace / "long.csv")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, path), "rows")

    shifted = good.copy()
    shifted["id"] = shifted["id"] + 100_000
    path = _write(shifted, workspace / "wrong_ids.csv")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, path), "ids do not match")

    duplicated = good.copy()
    duplicated.loc[1, "id"] = duplicated.loc[0, "id"]
    path = _write(duplicated, workspace / "dup_ids.csv")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, path), "repeats ids")

    text_ids = good.astype({"id": str})
    text_ids.loc[0, "id"] = "abc"
    path = _write(text_ids, workspace / "text_ids.csv")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, path), "not integers")

    bad_values = good.astype({label: object})
    bad_values.loc[0, label] = "maybe"
    path = _write(bad_values, workspace / "bad_values.csv")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, path), label)

    missing_value = good.astype({label: float})
    missing_value.loc[0, label] = np.nan
    path = _write(missing_value, workspace / "nan.csv")
    assert_fails_cleanly(evaluate_in_process(task_id, workspace, path), label)

    # Row order and extra columns do not matter.
    shuffled = good.sample(frac=1.0, random_state=0)
    shuffled["note"] = "x"
    path = _write(shuffled, workspace / "shuffled.csv")
    ordered = metrics_of(evaluate_in_process(task_id, workspace, workspace / "sample_submission.csv"))
    assert metrics_of(evaluate_in_process(task_id, workspace, path)) == ordered


@pytest.mark.parametrize("task_id", list(CSV_TASKS))
def test_evaluate_needs_the_secret_answer_file(task_id, tmp_path):
    task = load_task(task_id)
    workspace = lay_out(task_id, tmp_path / "ws")
    shutil.copy2(workspace / "sample_submission.csv", workspace / "submission.csv")
    assert task["secret_files"] == ["data/answer.csv"]
    (workspace / "data" / "answer.csv").unlink()
    assert_fails_cleanly(evaluate(task_id, workspace), "answer", "only present while")


@pytest.mark.parametrize("task_id", list(CSV_TASKS))
def test_a_better_model_beats_the_baseline(task_id, tmp_path):
    from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor
    from threadpoolctl import threadpool_limits

    label, kind = CSV_TASKS[task_id]
    workspace = lay_out(task_id, tmp_path / "ws")
    train = pd.read_csv(workspace / "data" / "train.csv")
    test = pd.read_csv(workspace / "data" / "test.csv")
    features = pd.concat([train.drop(columns=[label]), test]).drop(columns=["id"])
    categorical = [c for c in features.columns if not pd.api.types.is_numeric_dtype(features[c])]
    assert categorical
    encoded = pd.get_dummies(features, columns=categorical, dummy_na=True).astype(float)
    x_train, x_test = encoded.iloc[: len(train)], encoded.iloc[len(train) :]
    with threadpool_limits(limits=1):  # much faster than oversubscribing a small CI machine
        if kind == "classification":
            model = HistGradientBoostingClassifier(random_state=0)
            model.fit(x_train, train[label])
            prediction = model.predict(x_test).astype(int)
        else:
            model = HistGradientBoostingRegressor(random_state=0)
            model.fit(x_train, np.log(train[label]))
            prediction = np.exp(model.predict(x_test))
    pd.DataFrame({"id": test["id"], label: prediction}).to_csv(workspace / "submission.csv", index=False)

    metrics = metrics_of(evaluate(task_id, workspace))
    name, baseline = primary(task_id)
    assert metrics[name] > baseline + 0.03, (metrics, baseline)
    if kind == "regression":
        assert metrics["rmse"] < load_task(task_id)["baseline_scores"][0]["rmse"]


# ----------------------------------------------------------------------------- game task

BETTER_STRATEGY = textwrap.dedent(
    """
    def row_strategy(history):
        # Go twice, then yield once, so the other driver never holds a grudge.
        return 0 if len(history) % 3 == 2 else 1
    """
)


def _game_workspace(tmp_path: Path, strategy_source: str | None = None) -> Path:
    workspace = lay_out("laneMerge", tmp_path / "ws")
    if strategy_source is not None:
        (workspace / "strategy.py").write_text(strategy_source)
    return workspace


def test_game_baseline_reproduces_recorded_score(tmp_path):
    task = load_task("laneMerge")
    assert task["baseline_paths"] == []
    assert task["secret_files"] == ["target.py"]
    workspace = _game_workspace(tmp_path)
    metrics = metrics_of(evaluate("laneMerge", workspace))
    assert list(metrics) == list(task["baseline_scores"][0]) == ["Score"]
    assert metrics["Score"] == pytest.approx(task["baseline_scores"][0]["Score"], abs=1e-4)


def test_game_runs_like_the_runtime_runs_it(tmp_path):
    """runpy.run_path with the workspace appended to sys.path, from an unrelated cwd too."""
    workspace = _game_workspace(tmp_path)
    expected = metrics_of(evaluate("laneMerge", workspace))
    code = "import runpy, sys; sys.path.append(sys.argv[1]); runpy.run_path(sys.argv[2], run_name='__main__')"
    for cwd in (workspace, tmp_path):
        result = subprocess.run(
            [sys.executable, "-c", code, str(workspace), str(workspace / "evaluate.py")],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=SUBPROCESS_TIMEOUT,
        )
        assert metrics_of(result) == expected


def test_game_better_strategy_beats_the_baseline(tmp_path):
    workspace = _game_workspace(tmp_path, BETTER_STRATEGY)
    score = metrics_of(evaluate("laneMerge", workspace))["Score"]
    _, baseline = primary("laneMerge")
    assert score > baseline + 0.2, (score, baseline)


def test_game_score_is_deterministic_for_a_random_strategy(tmp_path):
    source = textwrap.dedent(
        """
        import random
        import numpy as np

        def row_strategy(history):
            print("chatty strategies must not break the JSON on stdout")
            return int(random.random() < 0.5) if len(history) % 2 else int(np.random.randint(2))
        """
    )
    workspace = _game_workspace(tmp_path, source)
    first = metrics_of(evaluate("laneMerge", workspace))
    second = metrics_of(evaluate("laneMerge", workspace))
    assert first == second
    assert 0.0 <= first["Score"] <= 5.0


@pytest.mark.parametrize(
    ("source", "fragment"),
    [
        ("def row_strategy(history):\n    return 2\n", "must be 0 (YIELD) or 1 (GO)"),
        ("def row_strategy(history):\n    return 'GO'\n", "must be 0 (YIELD) or 1 (GO)"),
        ("def row_strategy(history):\n    return None\n", "must be 0 (YIELD) or 1 (GO)"),
        ("def row_strategy(history):\n    raise ValueError('boom')\n", "raised an exception"),
        ("def something_else(history):\n    return 0\n", "row_strategy"),
        ("def row_strategy(history)\n    return 0\n", "importing strategy.py"),
    ],
)
def test_game_bad_strategies_fail_cleanly(tmp_path, source, fragment):
    workspace = _game_workspace(tmp_path, source)
    assert_fails_cleanly(evaluate("laneMerge", workspace), fragment)


def test_game_missing_strategy_fails_cleanly(tmp_path):
    workspace = _game_workspace(tmp_path)
    (workspace / "strategy.py").unlink()
    assert_fails_cleanly(evaluate("laneMerge", workspace), "strategy.py")


def test_game_evaluate_needs_the_secret_target(tmp_path):
    workspace = _game_workspace(tmp_path)
    (workspace / "target.py").unlink()
    assert_fails_cleanly(evaluate("laneMerge", workspace), "target.py", "only present while")
