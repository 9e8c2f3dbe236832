"""`air tasks` on an 80-column terminal: every name whole on its line, every column readable, and a
broken config's error in full below the table (a root written here from scratch, MLGym-like names)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from air.cli.main import main

LONG_NAME = "rlMountainCarContinuousReinforce"  # MLGym's longest task name: 32 characters


def _task(root: Path, name: str, **fields) -> None:
    folder = root / "data" / name
    folder.mkdir(parents=True)
    (folder / "evaluate.py").write_text("print('{}')\n")
    config = {
        "id": name,
        "name": name,
        "description": f"The {name} task.",
        "task_entrypoint": "CSVSubmissionTasks",
        "starter_code": [f"data/{name}/evaluate.py"],
        "evaluation_paths": ["evaluate.py"],
        **fields,
    }
    (root / "configs" / "tasks" / f"{name}.yaml").write_text(yaml.safe_dump(config))


@pytest.fixture
def root(tmp_path: Path) -> Path:
    (tmp_path / "configs" / "tasks").mkdir(parents=True)
    _task(tmp_path, LONG_NAME, task_entrypoint="ModelSubmissionTasks", baseline_scores=[{"Reward Mean": -24936834.0}])
    _task(tmp_path, "naturalLanguageInferenceMNLI", baseline_scores=[{"validation_accuracy": 52.51146204788589}])
    _task(tmp_path, "titanic", id="titanicSurvival", baseline_scores=[{"Accuracy": 0.76555}])
    _task(tmp_path, "regressionHousePrice", dataset_configs=["datasets/housePrice.yaml"])  # not there
    return tmp_path


def test_the_table_is_readable_at_80_columns(root: Path, monkeypatch, capsys) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    assert main(["tasks", "--task-root", str(root)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("regressionHousePrice: "))]
    # The title names the task root whole, however long the host's temporary folder makes it; the table fits.
    assert table[0].startswith("Tasks in ") and str(root) in table[0], out
    assert max(len(line) for line in table[1:]) <= 80, out
    # Names, headers and metrics stay whole on their line: nothing is folded mid-word.
    for word in (LONG_NAME, "naturalLanguageInferenceMNLI", "validation_accuracy", "Reward Mean", "baseline", "metric"):
        assert any(word in line for line in table), f"{word!r} is broken:\n{out}"
    assert any("id titanicSurvival" in line for line in table)
    assert any("-2.49368e+07" in line for line in table) and any("52.5115" in line for line in table)
    # The broken config's error after the table, whole, on one line (the terminal wraps it, not us).
    error = (
        f"regressionHousePrice: {root}/configs/tasks/regressionHousePrice.yaml: dataset config "
        f"'datasets/housePrice.yaml' not found at {root}/configs/datasets/housePrice.yaml"
    )
    assert error in lines, out
