"""Task names as users get them wrong: a case or a letter off, an MLGym task asked of the built-in root,
the checkout's configs/ folder given as the task root. Every command that loads tasks says the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from air.cli.main import main
from air.tasks import loader
from air.tasks.loader import UnknownTaskError, resolve_task_root
from tests.mlgym_like import write_mlgym_like_root
from tests.opt_in import mlgym_checkout


def test_a_name_off_by_case_or_a_letter_says_the_one_meant() -> None:
    for typo in ("lanemerge", "LANEMERGE", "laneMerg", "lanemerge.yaml"):
        with pytest.raises(UnknownTaskError, match="did you mean laneMerge\\?"):
            loader.load_task(typo)
    from air.tasks.names import did_you_mean

    assert did_you_mean("somethingElse", ["laneMerge", "loanDefault"]) is None


def test_an_mlgym_task_at_the_built_in_root_names_the_checkout_it_needs(tmp_path: Path) -> None:
    for name in ("titanic", "titanicSurvival", "battleOfSexes.yaml", "RLMETAMAZE"):
        with pytest.raises(UnknownTaskError, match="it is an MLGym task, not a built-in one: export MLGYM_ROOT="):
            loader.load_task(name)
    with pytest.raises(UnknownTaskError) as raised:  # in a user's root, no MLGym hint: it is just not there
        loader.load_task("battleOfSexes", write_mlgym_like_root(tmp_path / "mine"))
    assert "MLGym task" not in str(raised.value)
    from air.tasks.names import is_mlgym_task

    assert not is_mlgym_task("laneMerge")


@pytest.mark.parametrize("inside", ["configs", "configs/tasks"])
def test_a_folder_inside_a_checkout_given_as_its_root_suggests_the_checkout(tmp_path: Path, inside: str) -> None:
    checkout = write_mlgym_like_root(tmp_path / "MLGym").resolve()
    with pytest.raises(ValueError, match=f"did you mean {checkout}\\?"):
        resolve_task_root(checkout / inside)
    with pytest.raises(ValueError, match="has no configs/tasks/ folder. Point it at an MLGym checkout"):
        resolve_task_root(tmp_path)  # nothing to suggest


def test_air_tasks_suggests_the_checkout_too(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    checkout = write_mlgym_like_root(tmp_path / "MLGym").resolve()
    assert main(["tasks", "--task-root", str(checkout / "configs")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("air: error:") and f"did you mean {checkout}?" in err, err


def test_the_table_of_mlgym_tasks_matches_a_checkout() -> None:
    root = mlgym_checkout()
    if root is None:
        pytest.skip("no MLGym checkout: set AIR_TEST_MLGYM_ROOT (tests/opt_in.py)")
    from air.tasks.names import MLGYM_TASKS

    found = {p.stem: yaml.safe_load(p.read_text())["id"] for p in (root / "configs" / "tasks").glob("*.yaml")}
    assert found == MLGYM_TASKS
