"""Task configs without Docker: where the root comes from, typed loading, metrics, layout."""

from __future__ import annotations

import pytest
import yaml

from air.tasks.config import TaskError, metric_value
from air.tasks.loader import BUILTIN_TASK_ROOT, list_tasks, load_task, resolve_task_root
from air.tasks.workspace import parse_metrics, suspicion
from tests.mlgym_like import write_mlgym_like_root


@pytest.fixture
def mlgym_root(tmp_path):
    return write_mlgym_like_root(tmp_path / "MLGym")


def test_task_root_comes_from_argument_then_env_then_builtin(mlgym_root, tmp_path, monkeypatch) -> None:
    monkeypatch.delenv("MLGYM_ROOT", raising=False)
    # A cwd that looks like a task root must not be picked up.
    decoy = tmp_path / "decoy"
    (decoy / "configs" / "tasks").mkdir(parents=True)
    monkeypatch.chdir(decoy)
    assert resolve_task_root() == BUILTIN_TASK_ROOT
    monkeypatch.setenv("MLGYM_ROOT", str(mlgym_root))
    assert resolve_task_root() == mlgym_root
    assert resolve_task_root(BUILTIN_TASK_ROOT) == BUILTIN_TASK_ROOT
    with pytest.raises(TaskError, match="no configs/tasks"):
        resolve_task_root(tmp_path / "nowhere")


def test_mlgym_config_root_names_the_checkout_by_its_configs_folder(mlgym_root, tmp_path, monkeypatch) -> None:
    """The original guide's MLGYM_CONFIG_ROOT=<MLGym>/configs; MLGYM_ROOT wins when both are set."""
    monkeypatch.setenv("MLGYM_CONFIG_ROOT", str(mlgym_root / "configs"))
    assert resolve_task_root() == mlgym_root
    assert list_tasks() == list_tasks(mlgym_root) != list_tasks(BUILTIN_TASK_ROOT)
    monkeypatch.setenv("MLGYM_ROOT", str(BUILTIN_TASK_ROOT))
    assert resolve_task_root() == BUILTIN_TASK_ROOT
    monkeypatch.delenv("MLGYM_ROOT")
    monkeypatch.setenv("MLGYM_CONFIG_ROOT", str(mlgym_root))  # the checkout, not its configs/
    with pytest.raises(TaskError, match=r"MLGYM_CONFIG_ROOT.*<MLGym>/configs"):
        resolve_task_root()


def test_builtin_tasks_load_with_baselines() -> None:
    names = list_tasks()
    assert len(names) >= 3
    for name in names:
        task = load_task(name)
        assert task.baseline_score is not None and task.primary_metric in task.baseline
        assert task.secret_files, f"{name} must hide its answer file"
        assert "{dataset_docs}" not in task.description
        files = task.workspace_files()
        assert all(rel in files for rel in task.config.evaluation_paths + task.secret_files)


def test_unknown_task_lists_the_known_ones(mlgym_root) -> None:
    with pytest.raises(TaskError) as info:
        load_task("titanic", task_root=mlgym_root)
    assert "shipwreck" in str(info.value) and "chatty" in str(info.value)


def test_task_found_by_file_name_or_id(mlgym_root) -> None:
    assert load_task("shipwreck.yaml", mlgym_root).name == "shipwreck"
    assert load_task("titanicSurvival", mlgym_root).name == "shipwreck"


def test_a_misspelled_key_is_named_with_its_file(mlgym_root) -> None:
    path = mlgym_root / "configs" / "tasks" / "shipwreck.yaml"
    data = yaml.safe_load(path.read_text())
    data["evaluation_path"] = data.pop("evaluation_paths")
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(TaskError, match=r"shipwreck\.yaml.*evaluation_path"):
        load_task("shipwreck", mlgym_root)


def test_missing_dataset_folder_says_what_to_do(mlgym_root) -> None:
    import shutil

    shutil.rmtree(mlgym_root / "data" / "shipwreck" / "data")
    with pytest.raises(TaskError, match="expects local data"):
        load_task("shipwreck", mlgym_root).workspace_files()


def test_description_keeps_other_braces_and_known_leaks_are_secret(mlgym_root) -> None:
    task = load_task("shipwreck", mlgym_root)
    assert "SHIPWRECK:\nPassengers" in task.description and "{this}" in task.description
    assert task.secret_files == ["data/ground_truth.csv"]  # MLGym's titanic leak, hidden by id
    assert task.primary_metric == "Accuracy" and task.higher_is_better and task.baseline_score == 0.5
    files = task.workspace_files()
    assert {"evaluate.py", "baseline.py", "data/train.csv", "data/ground_truth.csv"} <= set(files)


def test_metric_lookup_and_direction(mlgym_root) -> None:
    assert metric_value({"accuracy": 0.9}, "Accuracy") == 0.9
    assert metric_value({"Score": "x"}, "Score") is None
    energy = load_task("buildingEnergy")
    assert energy.primary_metric == "r2" and energy.higher_is_better


def test_parse_metrics_per_entrypoint() -> None:
    assert parse_metrics("CSVSubmissionTasks", ' {"accuracy": 0.8}\n') == {"accuracy": 0.8}
    assert parse_metrics("ModelSubmissionTasks", 'log\n{"Reward Mean": 3}\nmore') == {"Reward Mean": 3}
    with pytest.raises(ValueError, match="one JSON object"):
        parse_metrics("CSVSubmissionTasks", 'loading\n{"accuracy": 0.8}')
    with pytest.raises(ValueError, match="one JSON object"):
        parse_metrics("PythonSubmissionTasks", "[1, 2]")


def test_known_leaks_follow_the_dataset_into_task_variants(mlgym_root) -> None:
    datasets = mlgym_root / "configs" / "datasets"
    (datasets / "titanic.yaml").write_text((datasets / "shipwreck.yaml").read_text())
    path = mlgym_root / "configs" / "tasks" / "shipwreck.yaml"
    data = yaml.safe_load(path.read_text())
    data.update(id="shipwreckVariantL1", dataset_configs=["datasets/titanic.yaml"])
    path.write_text(yaml.safe_dump(data))
    assert load_task("shipwreck", mlgym_root).secret_files == ["data/ground_truth.csv"]


def test_an_empty_or_half_generated_dataset_is_named_with_its_generator(mlgym_root) -> None:
    data = mlgym_root / "data" / "shipwreck" / "data"
    helpers = mlgym_root / "data" / "shipwreck" / "_helpers"
    helpers.mkdir()
    (helpers / "make_split.py").write_text("print('writes ../data')\n")
    dataset_yaml = mlgym_root / "configs" / "datasets" / "shipwreck.yaml"
    spec = yaml.safe_load(dataset_yaml.read_text())
    spec["train_split"] = {"name": "train", "file_regex": "./data/train*"}
    spec["valid_split"] = {"name": "valid", "file_regex": "./data/valid*"}
    dataset_yaml.write_text(yaml.safe_dump(spec))
    with pytest.raises(TaskError, match=r"no file for its 'valid' split \(\./data/valid\*\).*make_split\.py"):
        load_task("shipwreck", mlgym_root).workspace_files()
    (data / "valid.csv").write_text("PassengerId,Sex\n1,female\n")
    assert "data/valid.csv" in load_task("shipwreck", mlgym_root).workspace_files()
    for path in data.iterdir():
        path.unlink()
    with pytest.raises(TaskError, match=r"is empty .*make_split\.py"):
        load_task("shipwreck", mlgym_root).workspace_files()


@pytest.mark.parametrize(
    "task, metrics, score, agent_code_ran, flagged",
    [
        ("laneMerge", {"Score": 2.5}, 2.5, False, False),
        ("laneMerge", {"Score": 99.0}, 99.0, False, True),  # payoffs per round are 0..5
        ("laneMerge", {"Score": -0.1}, -0.1, False, True),
        ("laneMerge", {"Score": float("nan")}, float("nan"), False, True),
        ("loanDefault", {"accuracy": 1.01}, 1.01, False, True),
        ("buildingEnergy", {"r2": -5.0, "rmse": 90.0}, -5.0, False, False),  # R^2 has no lower bound
        ("buildingEnergy", {"r2": 0.9, "rmse": 9.0}, 0.9, True, False),
        ("buildingEnergy", {"r2": 0.9}, 0.9, True, True),  # agent code ran: not the task's metrics
        ("buildingEnergy", {"r2": 0.9, "rmse": "low"}, 0.9, True, True),
    ],
)
def test_scores_no_metric_can_reach_are_suspicious(task, metrics, score, agent_code_ran, flagged) -> None:
    assert bool(suspicion(load_task(task), metrics, score, agent_code_ran)) is flagged


def test_score_ranges_cover_the_builtin_tasks_and_a_config_may_declare_one(mlgym_root) -> None:
    for name in list_tasks(BUILTIN_TASK_ROOT):
        task = load_task(name)
        low, high = task.score_range
        assert (low is None or low <= task.baseline_score) and (high is None or task.baseline_score <= high)
    config = mlgym_root / "configs" / "tasks" / "shipwreck.yaml"
    data = yaml.safe_load(config.read_text())
    data["score_range"] = [0.0, 1.0]
    config.write_text(yaml.safe_dump(data))
    assert load_task("shipwreck", mlgym_root).score_range == (0.0, 1.0)
