"""The command lines air prints for a user, collected for the tests that run them through the parser of
the program they name (tests/cli/test_printed_hints.py for the classic front, tests/v1/test_v1_hints.py).

Two sources: the hint functions of ``air.cli.hints`` (policy-server's banner, tiny-model's), and every
backticked ``air ...`` span in a string of ``air/`` (errors, `air check`'s fixes, help texts). A span with
arguments is a command line and must parse; a bare ``air <command>`` names a command, which must exist.
"""

from __future__ import annotations

import ast
import contextlib
import os
import re
import shlex
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from rigs.patience import backstop

REPO = Path(__file__).resolve().parents[1]
AIR_SPAN = re.compile(r"`{1,2}((?:uv run |\.venv(?:-v1)?/bin/)?air [^`]+?)`{1,2}")
PLACEHOLDER = "1"  # an f-string's value: a word every option and positional of ours takes


def _text(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else PLACEHOLDER for v in node.values)
    return None


def air_spans() -> list[tuple[str, str]]:
    """(file:line, the span) for each backticked ``air ...`` in a string of air/ (f-strings filled in)."""
    found = []
    for path in sorted((REPO / "air").rglob("*.py")):
        if "builtin" in path.parts:
            continue
        tree = ast.parse(path.read_text())
        parts = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr) for v in node.values}
        for node in ast.walk(tree):
            text = None if id(node) in parts else _text(node)
            for match in AIR_SPAN.finditer(text or ""):
                found.append((f"{path.relative_to(REPO)}:{node.lineno}", match.group(1)))
    return found


def argv_of(line: str, program: str) -> list[str]:
    """The arguments after ``program`` in a shell line (leading VAR=value words and `uv run` dropped)."""
    words = shlex.split(line)
    while words and Path(words[0]).name != program:
        words.pop(0)
    assert words, f"{line!r} does not run {program}"
    return words[1:]


def air_parse_problem(line: str) -> str | None:
    """Why our own parser refuses ``line`` (None when it takes it): its error message, as a user would see it."""
    import io

    from air.cli.main import build_parser

    argv = argv_of(line, "air")
    parser = build_parser()
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        try:
            if len(argv) == 1:  # a command's name: it exists
                commands = parser._subparsers._group_actions[0].choices  # noqa: SLF001 (argparse keeps them there)
                return None if argv[0] in commands else f"no command {argv[0]!r}"
            parser.parse_args(argv)
        except SystemExit:
            return err.getvalue().strip().splitlines()[-1]
    return None


@contextlib.contextmanager
def policy_server_banner(
    command: list[str] | None = None, env: dict[str, str] | None = None, cwd: Path = REPO
) -> Iterator[list[str]]:
    """``air policy-server --port 0`` (this environment's, or ``command``) started, its banner's lines until
    "Press Ctrl-C"; stopped with Ctrl-C after."""
    if command is None:
        command = [sys.executable, "-m", "air.run_training", "policy-server", "--port", "0", "--policy", "noisy"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=cwd)
    try:
        lines: list[str] = []
        while not lines or not lines[-1].startswith("Press Ctrl-C"):
            line = process.stdout.readline()
            assert line, f"the server exited early: {lines}"
            lines.append(line.strip())
        yield lines
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=backstop(60))
        except subprocess.TimeoutExpired:
            process.kill()
            process.communicate()


def banner_url_and_model(lines: list[str]) -> tuple[str, str]:
    match = re.search(r"as model '([^']+)' at (http://127\.0\.0\.1:\d+/v1)", lines[0])
    assert match, lines
    return match.group(2), match.group(1)


def hints_of(lines: list[str]) -> list[str]:
    """The banner's suggested command lines (indented under "Point a client at it")."""
    start = lines.index("Point a client at it, e.g.:") + 1
    return [line for line in lines[start:] if not line.startswith("Press Ctrl-C")]


def env_without(*names: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if k not in names}
