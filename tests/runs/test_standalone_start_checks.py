"""`air standalone` answers a wrong argument before it imports the env's stack: a typo in a task name, an
env argument, a number or an env id is one line naming the option (and the name meant), with none of
verifiers, openai, docker, datasets, torch, transformers, pandas or streamlit imported, and no folder made.
Counted by what the process imported when the error came, not by timing it."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.mlgym_like import write_mlgym_like_root
from tests.runs.counted_imports import standalone_counting_imports as _standalone


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--task", "lanemerge"], "did you mean laneMerge?"),
        (["--env-arg", "max_turn=3"], "did you mean 'max_turns'?"),
        (["--env-arg", "container_memory=lots"], "container_memory"),
        (["--env", "simple_env", "--env-arg", "num_exampels=3"], "did you mean 'num_examples'?"),
        (["--steps", "0"], "--steps"),
        (["--env", "simpel_env"], "did you mean simple_env?"),
        (["--policy", "clever"], "clever"),
    ],
)
def test_an_argument_error_comes_before_the_heavy_imports(args: list[str], said: str, tmp_path: Path) -> None:
    out = _standalone(*args, "--output-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert out["code"] == 1
    lines = out["err"].strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("air: error:"), out["err"]
    assert said.lower() in lines[0].lower(), lines[0]
    assert out["heavy"] == [], f"imported before the error: {out['heavy']}"
    assert not (tmp_path / "run").exists(), "a refused start makes no folder"


def test_an_mlgym_task_without_its_checkout_says_to_export_mlgym_root(tmp_path: Path) -> None:
    out = _standalone("--task", "titanic", "--output-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert out["code"] == 1 and out["heavy"] == []
    assert "it is an mlgym task" in out["err"].lower() and "export MLGYM_ROOT=" in out["err"], out["err"]


def test_the_configs_folder_given_as_task_root_suggests_the_checkout(tmp_path: Path) -> None:
    checkout = write_mlgym_like_root(tmp_path / "MLGym")
    out = _standalone("--task-root", str(checkout / "configs"), "--output-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert out["code"] == 1 and out["heavy"] == []
    assert f"did you mean {checkout.resolve()}?" in out["err"], out["err"]


def test_a_task_of_an_env_arg_task_root_is_checked_there(tmp_path: Path) -> None:
    """--env-arg task_root and task_configs win over the flags: the names are checked in that root."""
    checkout = write_mlgym_like_root(tmp_path / "MLGym")
    args = ["--env-arg", f"task_root={checkout}", "--env-arg", 'task_configs=["Shipwreck"]']
    out = _standalone(*args, "--output-dir", str(tmp_path / "run"), cwd=tmp_path)
    assert out["code"] == 1 and out["heavy"] == []
    assert "Unknown task 'Shipwreck'" in out["err"] and "did you mean shipwreck?" in out["err"], out["err"]
