"""The programs a shell command runs, read the way bash reads it: which gets the long (training) timeout.

Words decide nothing: ``# python`` in a comment, ``echo python`` or a heredoc's body do not make a
command long. What counts is the program of each simple command (after ``;``, ``&&``, ``||``, ``|``,
``&``, parentheses and newlines), looked for behind variable assignments and wrappers (``env``,
``nohup``, ``time``, ``timeout 60``, ``uv run``, ``conda run -n x``, ``bash -c '...'``).
"""

from __future__ import annotations

import re
import shlex
from pathlib import PurePosixPath

LONG_PROGRAMS = re.compile(r"(python[0-9.]*|torchrun|accelerate|deepspeed)")
_OPERATOR_CHARS = set(";&|()")  # a token of these alone separates commands: ; && || | |& & ( ) ;;
_WRAPPERS = {"env", "nohup", "time", "nice", "ionice", "stdbuf", "exec", "command", "builtin", "xargs", "setsid"}
_WITH_VALUE = {"timeout": 1, "taskset": 1, "chrt": 1}  # a wrapper and the values it takes before the program
_OPTIONS_WITH_VALUE = {  # a wrapper's options that take the next word
    "env": {"-u", "--unset", "-C", "--chdir", "-S", "--split-string"},
    "nice": {"-n", "--adjustment"},
    "ionice": {"-c", "-n", "-p"},
    "timeout": {"-s", "--signal", "-k", "--kill-after"},
    "xargs": {"-n", "-I", "-P", "-d", "-L", "-s", "-a", "-E"},
}
_RUNNERS = {"uv": "run", "conda": "run", "mamba": "run", "poetry": "run", "pipenv": "run"}
_RUNNER_OPTIONS_WITH_VALUE = {"-n", "--name", "-p", "--prefix", "--with", "--python", "--project", "--directory"}
_SHELLS = {"bash", "sh", "dash", "zsh"}
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def _without_heredoc_bodies(command: str) -> str:
    lines, out, pending = command.split("\n"), [], []
    for line in lines:
        if pending:
            if line.strip() == pending[0]:
                pending.pop(0)
            continue
        out.append(line)
        pending.extend(m.group(2) for m in _HEREDOC.finditer(line))
    return "\n".join(out)


def _tokens(command: str) -> list[str]:
    lexer = shlex.shlex(_without_heredoc_bodies(command).replace("\n", " ; "), posix=True, punctuation_chars=";&|()<>")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # unbalanced quotes: bash refuses the line too
        return command.split()


def programs(command: str, depth: int = 0) -> list[str]:
    """The program names (basenames) of every simple command in ``command``."""
    found: list[str] = []
    tokens = _tokens(command)
    i, at_start = 0, True
    while i < len(tokens):
        word = tokens[i]
        if set(word) <= _OPERATOR_CHARS:
            at_start = True
            i += 1
            continue
        if not at_start or _ASSIGNMENT.match(word) or word.startswith(("<", ">")) or word in ("!", "{", "}"):
            i += 1
            continue
        name = PurePosixPath(word).name
        if name in _WRAPPERS or name in _WITH_VALUE:
            i += 1
            while i < len(tokens) and tokens[i].startswith("-"):
                i += 2 if tokens[i] in _OPTIONS_WITH_VALUE.get(name, ()) else 1
            i += _WITH_VALUE.get(name, 0)
            continue
        if name in _RUNNERS and i + 1 < len(tokens) and tokens[i + 1] == _RUNNERS[name]:
            i += 2
            while i < len(tokens) and tokens[i].startswith("-"):
                i += 2 if tokens[i] in _RUNNER_OPTIONS_WITH_VALUE else 1
            continue
        if name in _SHELLS and i + 2 < len(tokens) and tokens[i + 1] == "-c" and depth < 3:
            found.extend(programs(tokens[i + 2], depth + 1))
        found.append(name)
        at_start = False
        i += 1
    return found


def runs_long(command: str) -> bool:
    """Whether ``command`` starts a Python or training program (which gets the task's training timeout)."""
    return any(LONG_PROGRAMS.fullmatch(name) for name in programs(command))


def command_timeout(command: str, short: float, long: float, seconds_left: float | None) -> float:
    """``long`` for a command that runs a training program, else ``short``; never past the rollout's time left."""
    timeout = long if runs_long(command) else short
    return timeout if seconds_left is None else min(timeout, max(seconds_left, 1.0))
