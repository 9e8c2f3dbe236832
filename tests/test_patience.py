"""No wall-clock bound that host load can trip decides a test (issue 53, item 6).

A test's own wait on a subprocess, a thread, a future or a poll is a backstop against a hang: written as
``backstop(seconds)`` (rigs/patience.py stretches it for a loaded host) or as a literal of FLOOR_S or more.
The scan reads every Python file in tests/, each tier's, and names every shorter literal (0 is a look, not a
wait). A product's own parameter (``sandbox.run(cmd, timeout=1)``, a command timeout a test is about) is not a
wait of the test's and is not read.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rigs.patience import FLOOR_S, PATIENCE, backstop

ROOT = Path(__file__).resolve().parents[1]
TESTS = ROOT / "tests"

SUBPROCESS_CALLS = {"run", "check_output", "check_call", "call"}  # subprocess.<name>(..., timeout=)
WAIT_METHODS = {"communicate", "wait", "join", "result", "wait_procs"}  # <obj>.<name>(timeout=)
CLOCKS = {"monotonic", "time", "perf_counter"}  # time.<clock>() + N: a poll's deadline


def _number(node: ast.expr) -> float | None:
    """The value of a literal number or arithmetic of literals (``300 + 15``); None for anything else."""
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Mult):
        left, right = _number(node.left), _number(node.right)
        if left is not None and right is not None:
            return left + right if isinstance(node.op, ast.Add) else left * right
    return None


def _is_clock(node: ast.expr) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CLOCKS
        and isinstance(node.func.value, ast.Name)
        and node.func.value.id == "time"
    )


def short_waits(source: str) -> list[tuple[int, str]]:
    """(line, what) for each wait of the test's own bounded by a literal under FLOOR_S."""
    found: list[tuple[int, str]] = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute | ast.Name):
            func = node.func
            name, owner = (func.attr, func.value) if isinstance(func, ast.Attribute) else (func.id, None)
            waits = (owner is not None and name in WAIT_METHODS) or (
                name in SUBPROCESS_CALLS and isinstance(owner, ast.Name) and owner.id == "subprocess"
            )
            bounds = [kw.value for kw in node.keywords if kw.arg == "timeout"] if waits or name == "wait_for" else []
            # asyncio's wait_for(awaitable, seconds), rigs.fleet's wait_for(predicate, seconds, what)
            if name == "wait_for" and len(node.args) >= 2:
                bounds.append(node.args[1])
            for bound in bounds:
                seconds = _number(bound)
                if seconds is not None and 0 < seconds < FLOOR_S:  # timeout=0: "done already?", no wait
                    found.append((node.lineno, f"{ast.unparse(node.func)}(... {seconds:g} s)"))
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            for clock, bound in ((node.left, node.right), (node.right, node.left)):
                seconds = _number(bound)
                if _is_clock(clock) and seconds is not None and seconds < FLOOR_S:
                    found.append((node.lineno, f"deadline {ast.unparse(node)}"))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(ast.parse(source))
    return found


def test_the_scan_finds_each_kind_of_short_wait_and_passes_a_backstop() -> None:
    """The scan can fail: each shape of a short bound is found, its backstop form and a product's are not."""
    source = """
import asyncio, subprocess, time
from rigs.patience import backstop
async def waits(process, sandbox, thread, future, event):
    subprocess.run(["x"], timeout=120)
    subprocess.check_output(["x"], timeout=60 + 30)
    process.communicate(timeout=30)
    process.wait(timeout=5)
    thread.join(timeout=5)
    future.result(timeout=120)
    await asyncio.wait_for(event.wait(), 60)
    wait_for(lambda: True, 30, "a rig's poll")
    deadline = time.monotonic() + 90
    subprocess.run(["x"], timeout=backstop(120))
    subprocess.run(["x"], timeout=600)
    await asyncio.wait_for(event.wait(), backstop(60))
    await sandbox.run("sleep 9", timeout=1)
    process.wait()
    future.result(timeout=0)
"""
    found = short_waits(source)
    assert [line for line, _ in found] == [5, 6, 7, 8, 9, 10, 11, 12, 13], found
    assert "subprocess.check_output(... 90 s)" in found[1][1]


def test_no_test_waits_on_a_short_literal_bound() -> None:
    short = [
        f"{path.relative_to(ROOT)}:{line}: {what}"
        for path in sorted([*TESTS.rglob("*.py"), *(ROOT / "rigs").rglob("*.py")])
        for line, what in short_waits(path.read_text())
    ]
    assert not short, (
        f"waits that a loaded host can run out (under {FLOOR_S} s, not through rigs/patience.py's backstop()):\n"
        + "\n".join(short)
    )


@pytest.mark.timeout(30)
def test_pytest_timeouts_are_stretched_by_the_patience(request: pytest.FixtureRequest) -> None:
    """pytest-timeout's marks are backstops too: conftest stretches each one by PATIENCE."""
    assert PATIENCE >= 1
    assert request.node.get_closest_marker("timeout").args[0] == backstop(30)


@pytest.mark.parametrize(("value", "said"), [("fast", "a factor such as 10"), ("0.5", "at least 1")])
def test_a_wrong_patience_is_named(value: str, said: str) -> None:
    """AIR_TEST_PATIENCE=fast fails the session's start with the variable named, not a bare float() error."""
    done = subprocess.run(
        [sys.executable, "-c", "import rigs.patience"],
        cwd=ROOT,
        env={**os.environ, "AIR_TEST_PATIENCE": value},
        capture_output=True,
        text=True,
        timeout=backstop(60),
    )
    assert done.returncode != 0 and f"AIR_TEST_PATIENCE={value!r}: {said}" in done.stderr, done.stderr
