"""Root's no-follow access to the workspace (scripts/workspace_guard.py), on the host against a stand-in
workspace: links at every place root could follow one, FIFOs, replaced folders. The container's own
paths are exercised through the env's rollout path in test_red_team_links.py."""

from __future__ import annotations

import os
import stat
import sys
import threading
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "air" / "tasks" / "scripts"
sys.path.insert(0, str(SCRIPTS))

import workspace_guard  # noqa: E402
from workspace_guard import WorkspaceProblem  # noqa: E402

as_root = pytest.mark.skipif(os.geteuid() != 0, reason="the task's folders are root's: needs root to lay them out")


@pytest.fixture
def ws(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    workspace = tmp_path / "home" / "workspace"
    (workspace / "data").mkdir(parents=True)
    monkeypatch.setattr(workspace_guard, "WORKSPACE", str(workspace))
    return workspace


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Where a link planted by the agent points: nothing may be read from or written to it."""
    target = tmp_path / "outside"
    target.mkdir()
    (target / "answer.csv").write_text("id,label\n1,secret\n")
    return target


def test_a_regular_submission_is_copied(ws: Path, tmp_path: Path) -> None:
    (ws / "submission.csv").write_text("id,label\n1,0\n")
    workspace_guard.copy_submission("submission.csv", tmp_path / "copy.csv")
    assert (tmp_path / "copy.csv").read_text() == "id,label\n1,0\n"


def test_a_linked_submission_is_refused(ws: Path, outside: Path, tmp_path: Path) -> None:
    (ws / "submission.csv").symlink_to(outside / "answer.csv")
    with pytest.raises(WorkspaceProblem, match="symbolic link"):
        workspace_guard.copy_submission("submission.csv", tmp_path / "copy.csv")
    assert not (tmp_path / "copy.csv").exists()


def test_a_missing_submission_says_where_it_goes(ws: Path, tmp_path: Path) -> None:
    with pytest.raises(WorkspaceProblem, match=f"No submission file found at {ws}/submission.csv"):
        workspace_guard.copy_submission("submission.csv", tmp_path / "copy.csv")


def test_a_fifo_submission_is_refused_without_waiting(ws: Path, tmp_path: Path) -> None:
    os.mkfifo(ws / "submission.csv")
    done = threading.Event()

    def copy() -> None:
        with pytest.raises(WorkspaceProblem, match="not a regular file"):
            workspace_guard.copy_submission("submission.csv", tmp_path / "copy.csv")
        done.set()

    threading.Thread(target=copy, daemon=True).start()
    assert done.wait(10), "copying a FIFO blocked"


def test_an_oversized_submission_is_refused(ws: Path, tmp_path: Path) -> None:
    (ws / "submission.csv").write_bytes(b"x" * 2000)
    with pytest.raises(WorkspaceProblem, match="at most 1000"):
        workspace_guard.copy_submission("submission.csv", tmp_path / "copy.csv", limit=1000)


def test_a_linked_workspace_or_folder_above_is_not_followed(ws: Path, outside: Path, tmp_path: Path) -> None:
    (outside / "submission.csv").write_text("id,label\n1,secret\n")
    ws.rename(tmp_path / "moved")
    ws.symlink_to(outside)
    with pytest.raises(WorkspaceProblem, match="is not a folder"):
        workspace_guard.copy_submission("submission.csv", tmp_path / "copy.csv")
    ws.unlink()
    ws.parent.rename(tmp_path / "home-moved")
    ws.parent.symlink_to(tmp_path / "home-moved")  # a link further up the path
    with pytest.raises(WorkspaceProblem, match="is not a folder"):
        workspace_guard.copy_submission("submission.csv", tmp_path / "copy.csv")


@as_root
def test_restore_replaces_a_link_with_the_pristine_file(ws: Path, outside: Path, tmp_path: Path) -> None:
    pristine = tmp_path / "pristine.py"
    pristine.write_text("print('pristine')\n")
    (ws / "evaluate.py").symlink_to(outside / "answer.csv")
    workspace_guard.restore("evaluate.py", pristine, 0, 0, 0o644)
    restored = os.lstat(ws / "evaluate.py")
    assert stat.S_ISREG(restored.st_mode) and restored.st_uid == 0 and stat.S_IMODE(restored.st_mode) == 0o644
    assert (ws / "evaluate.py").read_text() == "print('pristine')\n"
    assert (outside / "answer.csv").read_text() == "id,label\n1,secret\n", "root wrote through the link"


@as_root
def test_restore_never_works_in_a_folder_that_is_not_the_tasks(ws: Path, outside: Path, tmp_path: Path) -> None:
    pristine = tmp_path / "answer.csv"
    pristine.write_text("the answers\n")
    os.chown(ws / "data", 0, 0)
    (ws / "data").rename(ws / "data-moved")
    (ws / "data").symlink_to(outside)  # a link where data/ was
    with pytest.raises(WorkspaceProblem, match="data/ in the workspace is no longer the task's own folder"):
        workspace_guard.restore("data/answer.csv", pristine, 0, 0, 0o640)
    (ws / "data").unlink()
    (ws / "data").mkdir()
    os.chown(ws / "data", 1000, 1000)  # the agent's own folder of that name
    with pytest.raises(WorkspaceProblem, match="Put the original back"):
        workspace_guard.restore("data/answer.csv", pristine, 0, 0, 0o640)
    assert sorted(p.name for p in outside.iterdir()) == ["answer.csv"] and not (ws / "data" / "answer.csv").exists()


@as_root
def test_a_restored_secret_is_private_from_its_first_byte(ws: Path, tmp_path: Path) -> None:
    pristine = tmp_path / "answer.csv"
    pristine.write_text("the answers\n")
    os.chown(ws / "data", 0, 0)
    workspace_guard.restore("data/answer.csv", pristine, 0, 4242, 0o640)
    info = os.lstat(ws / "data" / "answer.csv")
    assert (info.st_uid, info.st_gid, stat.S_IMODE(info.st_mode)) == (0, 4242, 0o640)
    workspace_guard.remove("data/answer.csv")
    assert not (ws / "data" / "answer.csv").exists()
