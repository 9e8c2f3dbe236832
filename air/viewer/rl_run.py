"""prime-rl's run folders as today's ``rl`` leaves them (``rl @ config.toml --output-dir OUT``): ``OUT/<run>/``
holds ``configs/`` (the resolved configs as JSON), ``logs/``, ``broadcasts/`` and ``checkpoints/`` (weights),
``rollouts/step_N/`` (traces) and ``metrics.jsonl``, one line per step from the orchestrator and one from the
trainer. What is here: finding such folders, telling their own files from trajectories, and what their
configs say about the env (its trajectory folder, its format-error penalty). Reads files; nothing else."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

METRICS_FILE = "metrics.jsonl"  # prime-rl's file monitor (on by default): <output_dir>/<run>/metrics.jsonl
CONFIGS = "configs"
# prime-rl's own folders in a run folder: configs and weights are JSON too, and never trajectories.
OWN_FOLDERS = frozenset({CONFIGS, "logs", "broadcasts", "checkpoints", "weights", "rollouts", "evals"})
SEARCH_DEPTH = 3  # OUT/<run>, or outputs/learning/learn/rl/<run> opened at outputs/learning/learn


def is_rl_run(folder: Path) -> bool:
    """Whether ``folder`` is a prime-rl run folder: its metrics file, or the orchestrator's config in it."""
    return (folder / METRICS_FILE).is_file() or (folder / CONFIGS / "orchestrator.json").is_file()


def find_rl_runs(directory: Path, depth: int = SEARCH_DEPTH) -> list[Path]:
    """The prime-rl run folders at or under ``directory``, ``depth`` levels down at most, sorted. Hidden
    folders, W&B's, trajectory folders and a run's own folders are not searched."""
    found: list[Path] = []

    def visit(folder: Path, left: int) -> None:
        if is_rl_run(folder):
            found.append(folder)
            return
        if left == 0:
            return
        try:
            with os.scandir(folder) as entries:
                children = sorted(e.name for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            return
        for name in children:
            if not name.startswith(".") and name not in {"wandb", "trajectories"}:
                visit(folder / name, left - 1)

    visit(Path(directory), depth)
    return found


def run_label(run: Path, directory: Path) -> str:
    """The run's name as the viewer shows it: its path under the opened folder, else the folder's name."""
    try:
        relative = run.relative_to(directory).as_posix()
    except ValueError:
        relative = ""
    return relative if relative not in ("", ".") else run.name or str(run)


class OwnFiles:
    """Tells a run folder's own files (configs, weights, traces) from trajectories under ``root``; which
    folders are runs is looked up once per folder."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._runs: dict[Path, bool] = {}

    def __call__(self, path: Path) -> bool:
        try:
            parts = path.relative_to(self.root).parts
        except ValueError:
            return False
        for depth, name in enumerate(parts[:-1]):
            if name in OWN_FOLDERS:
                folder = self.root.joinpath(*parts[:depth])
                if folder not in self._runs:
                    self._runs[folder] = is_rl_run(folder)
                if self._runs[folder]:
                    return True
        return False


def _config_values(run: Path, key: str) -> Iterator[Any]:
    """Every value of ``key`` at any depth of the run's JSON configs (the env's arguments are nested in the
    orchestrator's config and in each env server's, ``configs/envs/<split>/<name>.json``)."""
    folder = run / CONFIGS
    if not folder.is_dir():
        return
    for path in sorted(folder.rglob("*.json")):
        try:
            value = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        stack = [value]
        while stack:
            item = stack.pop()
            if isinstance(item, dict):
                if key in item:
                    yield item[key]
                stack.extend(item.values())
            elif isinstance(item, list):
                stack.extend(item)


def format_error_penalty(run: Path) -> float | None:
    """The env's ``reward.format_error_penalty`` as the run's configs give it; None when they do not."""
    for value in _config_values(run, "format_error_penalty"):
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def trajectory_folders(run: Path) -> list[Path]:
    """Where the run's trajectories may be: the run folder itself, and the env's ``trajectory_dir`` where the
    configs name an absolute one (a relative one was resolved against the env server's working folder, which
    the configs do not record)."""
    folders = [run]
    for value in _config_values(run, "trajectory_dir"):
        if isinstance(value, str) and Path(value).expanduser().is_absolute():
            folder = Path(value).expanduser()
            if folder not in folders:
                folders.append(folder)
    return folders
