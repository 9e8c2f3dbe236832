"""The folder of the last `uv run rl` on this machine, so that `air view` with no folder opens it.

Written when a run starts (``<state>/last-rl-run``, state as in :func:`air.launch.process_records.state_dir`), so a
run under way can be watched too; read by ``air view``.
"""

from __future__ import annotations

from pathlib import Path

from air.launch.process_records import state_dir

RECORD = "last-rl-run"


def remember_rl_run(folder: Path) -> None:
    path = state_dir() / RECORD
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{folder.resolve()}\n")


def last_rl_run() -> Path | None:
    """The last run's folder, if one was recorded and is still there."""
    try:
        folder = Path((state_dir() / RECORD).read_text().strip())
    except OSError:
        return None
    return folder if folder.is_dir() else None
