"""`air check` promises no duration (it once said "about 6 s" and took 32 s on a loaded 2-core host): it
names each check as it starts, and its verdict says how long the checks took, measured."""

from __future__ import annotations

import io
import re
import subprocess
import sys

from rich.console import Console

from air.launch.preflight import CHECKS, run_preflight
from air.launch.preflight_rows import CheckRow, PreflightOptions
from air.launch.preflight_view import render_rows
from rigs.patience import backstop
from tests.printed_hints import REPO


def test_each_check_is_announced_before_its_rows() -> None:
    from air.launch.preflight import check_name

    events: list[tuple] = []
    rows = run_preflight(
        PreflightOptions(),
        on_row=lambda row: events.append(("row", row.check)),
        on_check=lambda name, number, of: events.append(("check", name, number, of)),
    )
    announced = [event[1:] for event in events if event[0] == "check"]
    assert announced == [(check_name(c), n, len(CHECKS)) for n, c in enumerate(CHECKS, start=1)]
    assert events[0][0] == "check" and len(rows) == sum(1 for event in events if event[0] == "row")
    assert ("env loads", len(CHECKS), len(CHECKS)) == announced[-1]


def test_the_verdict_says_how_long_the_checks_took() -> None:
    out = io.StringIO()
    render_rows(Console(file=out, width=200), [CheckRow("docker", "pass", "engine answers")], seconds=31.84)
    assert out.getvalue().splitlines()[-1] == "ready: 1 pass (checked in 31.8 s)"


def test_air_check_piped_ends_with_the_measured_time() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "air.run_training", "check"],
        capture_output=True,
        text=True,
        timeout=backstop(300),
        cwd=REPO,
    )
    last = done.stdout.splitlines()[-1]
    assert re.fullmatch(r"(not )?ready: .+ \(checked in \d+\.\d s\)", last), done.stdout
    assert not re.search(r"about \d+ ?s\b", done.stdout + done.stderr)
