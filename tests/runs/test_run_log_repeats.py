"""The console says each cause once while a run goes on (a dead endpoint or a full disk fails every
rollout alike), and at the end how often each came; run.log keeps every line."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from air.runs.run_log import console_lines, log_file


def test_one_cause_in_every_rollout_is_one_line_and_a_count(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = logging.getLogger("air.env.core")
    with console_lines(), log_file(tmp_path / "run.log"):
        for i in range(5):  # each rollout's own file in its line: still one cause
            log.warning("could not save the trajectory of a laneMerge rollout: [Errno 28] No space: '/r/%d.json'", i)
        log.error("Aborted rollout due to ModelError() -> APIConnectionError('Connection error.')")
        log.error("Aborted rollout due to ModelError() -> APIConnectionError('Connection error.')")
        log.error("the engine went away")
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "warning: could not save the trajectory of a laneMerge rollout: [Errno 28] No space: '/r/0.json'",
        "error: Aborted rollout due to ModelError() -> APIConnectionError('Connection error.')",
        "error: the engine went away",
        "warning: could not save the trajectory of a laneMerge rollout: [Errno 28] No space: '/r/0.json' "
        "(x5 in all; each one is in run.log)",
        "error: Aborted rollout due to ModelError() -> APIConnectionError('Connection error.') "
        "(x2 in all; each one is in run.log)",
    ]
    assert len((tmp_path / "run.log").read_text().splitlines()) == 8
