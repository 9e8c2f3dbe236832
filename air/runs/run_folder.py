"""A run's own folder: unique, claimed before anything is written, and removed again when the run
recorded nothing (a failed start leaves no empty folder behind).

A default folder is ``outputs/standalone/<time>-<short id>``: two runs started in the same second get
two folders. A folder the user names must be empty or new; one holding a run is refused unless the
caller asks to overwrite it, and then only when it holds nothing but a run's own files. The claim is
``run.log`` created exclusively, so two runs given the same folder at once cannot both have it.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from air.runs.interruption import holds_a_finished_rollout

# What a standalone run writes into its folder (nothing else is removed by --overwrite).
RUN_FILES = frozenset({"run.log", "steps.jsonl", "summary.json", "trajectories", "wandb"})
CLAIM = "run.log"


class RunFolderError(ValueError):
    """The folder cannot be this run's: the message names it and the fix."""


@dataclass(frozen=True)
class RunFolder:
    path: Path
    created: bool  # made by this run (then removed whole when the run recorded nothing)
    made_from: Path | None = None  # the outermost folder this run made to hold it (outputs/, say)

    def recorded_anything(self) -> bool:
        """A finished rollout or a step: rollouts Ctrl-C cut short (no reward) alone are not worth a folder."""
        steps = self.path / "steps.jsonl"
        return holds_a_finished_rollout(self.path / "trajectories") or (steps.is_file() and steps.stat().st_size > 0)

    def discard(self) -> None:
        """Remove what this run wrote (it recorded nothing worth keeping), and the folder if it made it."""
        for name in RUN_FILES:
            target = self.path / name
            if target.is_dir() and not target.is_symlink():
                shutil.rmtree(target, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    target.unlink()
        if not self.created:
            return
        folder = self.path
        while True:  # the folder, then the parents this run made, while they are empty
            try:
                folder.rmdir()
            except OSError:  # not empty: someone else put something there
                return
            if folder == self.made_from or self.made_from is None or folder.parent == folder:
                return
            folder = folder.parent


def default_run_dir(base: Path) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    return base / f"{stamp}-{secrets.token_hex(3)}"


def open_run_folder(requested: str | os.PathLike[str] | None, base: Path, overwrite: bool = False) -> RunFolder:
    """Claim ``requested`` (or a new folder under ``base``) for one run."""
    if requested is None:
        made_from = _outermost_missing(base.resolve())
        while True:  # a clash needs the same second and the same 24 random bits: retry, never share
            path = default_run_dir(base).resolve()
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                path.mkdir()
            except FileExistsError:
                continue
            _claim(path)
            return RunFolder(path, created=True, made_from=made_from or path)
    path = Path(requested).expanduser().resolve()
    if path.exists() and not path.is_dir():
        raise RunFolderError(f"output folder {path} is a file; choose a folder")
    created = not path.exists()
    made_from = _outermost_missing(path)
    if created:
        path.mkdir(parents=True, exist_ok=True)
    else:
        entries = sorted(p.name for p in path.iterdir())
        if entries and not overwrite:
            raise RunFolderError(
                f"output folder {path} is not empty ({', '.join(entries[:5])}{', ...' if len(entries) > 5 else ''}); "
                "choose a new one, or pass --overwrite to replace the run in it"
            )
        foreign = [name for name in entries if name not in RUN_FILES]
        if foreign:
            raise RunFolderError(
                f"output folder {path} holds files that are not a run's ({', '.join(foreign[:5])}); "
                "--overwrite only replaces a run folder: choose another --output-dir"
            )
        RunFolder(path, created=False).discard()
    _claim(path)
    return RunFolder(path, created=created, made_from=made_from)


def _claim(path: Path) -> None:
    try:
        fd = os.open(path / CLAIM, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
    except FileExistsError:
        raise RunFolderError(f"output folder {path} was just taken by another run; choose another") from None
    os.close(fd)


def _outermost_missing(path: Path) -> Path | None:
    """The outermost folder of ``path`` that does not exist yet (what creating it would make)."""
    missing = None
    while not path.exists():
        missing, path = path, path.parent
    return missing
