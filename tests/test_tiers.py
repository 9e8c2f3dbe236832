"""The tiers stay true: every slow entry names a test that exists (a renamed test would otherwise slip into
the fast tier unnoticed), and the fast tier leaves out exactly the slow and red-team tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from rigs.patience import backstop
from tests.tiers import SLOW_TESTS

ROOT = Path(__file__).resolve().parents[1]


def test_every_slow_entry_names_a_test_that_exists() -> None:
    missing = []
    for entry in sorted(SLOW_TESTS):
        path, _, name = entry.partition("::")
        source = ROOT / path
        if not source.is_file() or (name and f"def {name}(" not in source.read_text()):
            missing.append(entry)
    assert not missing, f"tests/tiers.py names tests that do not exist: {missing}"


def _collected(*args: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=backstop(300),
    ).stdout
    return {line for line in out.splitlines() if "::" in line}


def test_the_fast_tier_is_the_full_one_less_slow_and_red_team_tests() -> None:
    fast, everything = _collected(), _collected("--all")
    left_out = everything - fast
    assert fast and fast < everything
    assert all(
        test.split("[")[0] in SLOW_TESTS or test.split("::")[0] in SLOW_TESTS or "/test_red_team" in test
        for test in left_out
    ), sorted(left_out)[:5]
    assert any("/test_red_team" in test for test in left_out), "the red-team tests run only with --all"
