"""What a recording shows of its task's files before the agent changed them, against this checkout's.

A run records no hash of its task, but its first turns often show the files: ``ls -l`` prints their
sizes, MLGym's ``open`` their line counts. A file that differs (MLGym added licence headers and changed
starter code since its published runs) explains a replay that does not reproduce.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path, PurePosixPath

from air.env.trajectories import TrajectoryRecord
from air.sandbox.config import WORKSPACE

# Commands that leave the workspace's files as they were; the first other one ends what can be compared.
_LOOKS = {"ls", "open", "cat", "goto", "scroll_down", "scroll_up", "find_file", "search_file", "search_dir"}
_LOOKS |= {"head", "tail", "wc", "pwd", "validate"}
_SHELL = re.compile(r"[;&|<>`$(]")
# GNU ls -l of a regular file: mode, links, owner, group, size, date, name (MLGym's alias adds -F's '*').
_LS_FILE = re.compile(
    r"^-[-rwxsStT]{9}[.+@]?\s+\d+\s+\S+\s+\S+\s+(?P<size>\d+)\s+\w{3}\s+\d{1,2}\s+[\d:]{4,5}\s+(?P<name>.+?)[*=|]?$"
)
_OPENED = re.compile(r"^\[File: (?P<path>.+?) \((?P<lines>\d+) lines total\)\]", re.MULTILINE)


def checkout_differences(record: TrajectoryRecord, files: dict[str, Path], hidden: set[str]) -> list[str]:
    """``file (what the run showed, what this checkout has)`` for each workspace file the recording showed
    before its first change that differs here. ``files``: the checkout's workspace files; ``hidden``: those
    the agent never sees (secrets)."""
    sizes: dict[str, int] = {}
    lines: dict[str, int] = {}
    listed: set[str] | None = None  # the workspace's top level, when a long listing showed it
    for turn in record.turns:
        command = (turn.command or "").strip()
        if not command:
            continue
        try:
            words = shlex.split(command)
        except ValueError:
            break
        if not words or words[0] not in _LOOKS or _SHELL.search(command):
            break
        if words[0] == "ls":
            found = _long_listing(words[1:], turn.output)
            if found is not None:
                folder, entries = found
                sizes.update({_join(folder, name): size for name, size in entries.items()})
                if folder == "":
                    listed = set(entries)
        for match in _OPENED.finditer(turn.output):
            rel = _relative(match.group("path"))
            if rel is not None:
                lines[rel] = int(match.group("lines"))
    found_here = {rel for rel in files if rel not in hidden}
    differences = []
    for rel, size in sorted(sizes.items()):
        if rel not in files:
            differences.append(f"{rel} (in the run's workspace, not in this checkout)")
        elif (here := files[rel].stat().st_size) != size:
            differences.append(f"{rel} ({size} B in the run, {here} B here)")
    for rel, count in sorted(lines.items()):
        if rel in files and rel not in sizes and (here := _line_count(files[rel])) != count:
            differences.append(f"{rel} ({count} lines in the run, {here} here)")
    if listed is not None:
        extra = sorted(rel for rel in found_here if "/" not in rel and rel not in listed)
        differences += [f"{rel} (in this checkout, not in the run's workspace)" for rel in extra]
    return differences


def _long_listing(arguments: list[str], output: str) -> tuple[str, dict[str, int]] | None:
    """(the folder, relative to the workspace, and its regular files' sizes) of ``ls -l [folder]``."""
    flags = [a for a in arguments if a.startswith("-") and not a.startswith("--")]
    folders = [a for a in arguments if not a.startswith("-")]
    if not any("l" in flag for flag in flags) or len(folders) > 1 or any(c in "".join(folders) for c in "*?["):
        return None
    folder = _relative(folders[0]) if folders else ""
    if folder is None:
        return None
    entries = {}
    for line in output.splitlines():
        match = _LS_FILE.match(line.rstrip())
        if match:
            entries[match.group("name")] = int(match.group("size"))
    return (folder, entries) if entries else None


def _relative(path: str) -> str | None:
    """A path the agent named (from the workspace, where every recording starts), relative to the workspace."""
    posix = PurePosixPath(path if path.startswith("/") else f"{WORKSPACE}/{path}")
    try:
        rel = PurePosixPath(*[p for p in posix.parts if p != "."]).relative_to(WORKSPACE)
    except ValueError:
        return None
    return "" if str(rel) == "." else str(rel)


def _join(folder: str, name: str) -> str:
    return f"{folder}/{name}" if folder else name


def _line_count(path: Path) -> int:
    """Lines as MLGym's ``open`` counts them (awk's NR: a last line without a newline counts too)."""
    data = path.read_bytes()
    return data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
