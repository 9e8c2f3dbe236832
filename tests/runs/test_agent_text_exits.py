"""Agent text leaves a run inert at each exit (issue 62): the console's closing lines and its log lines,
run.log, W&B's samples table, the demo's reasons and a command's error. Escape sequences, controls and
bidirectional overrides never reach them raw, Rich markup prints as written, and the length is capped;
all through air.sandbox.neutral."""

from __future__ import annotations

import io
import logging
import re
import unicodedata
from pathlib import Path

import pytest
from rich.console import Console

from air.cli.errors import CommandError
from air.runs.demo import DemoResult, print_results
from air.runs.run_log import console_lines, log_file
from air.runs.standalone_view import print_masked
from air.runs.wandb_logging import sample_rows

MARKUP = "[link=https://example.com]x[/link] [bold red]loud[/bold red]"
HOSTILE = (
    f"{MARKUP} \x1b[31mred\x1b[0m \x1b]8;;http://evil.example\x07click\x1b]8;;\x07 \x1b]0;title\x07"
    " bell\x07 \x9b2J nul\x00 \x85 \u202eevil\u202c \u2066iso\u2069"
)


def raw_controls(text: str) -> list[str]:
    """Control, format, bidirectional and separator characters in ``text``, less line breaks and tabs."""
    return [c for c in text if unicodedata.category(c) in {"Cc", "Cf", "Cs", "Zl", "Zp"} and c not in "\n\t"]


def recording_console() -> Console:
    """A terminal's console: it would draw colours and links, and records what it printed."""
    return Console(file=io.StringIO(), record=True, force_terminal=True, color_system="truecolor", width=1000)


def test_a_hostile_rollout_error_reaches_run_log_and_the_console_inert(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A whole `air standalone` run of simple_env whose env fails on every turn with the agent's text in its
    error (as an env fault quotes a container's output): the traceback in run.log, the error lines on the
    console and the masked cause at the end."""
    import simple_env
    from air.cli.main import main

    def fails(game: object, reply: str, limit: int) -> str:
        raise RuntimeError(f"{HOSTILE} {reply} " + "y" * 300_000)

    monkeypatch.setattr(simple_env, "_play", fails)
    out = tmp_path / "run"
    argv = ["standalone", "--env", "simple_env", "--steps", "1", "--batch-size", "2", "--rollouts-per-example", "2"]
    assert main([*argv, "--output-dir", str(out)]) == 1  # every rollout masked
    printed = capsys.readouterr()
    run_log = (out / "run.log").read_text()
    assert f"RuntimeError: {MARKUP} red click  bell<U+0007>" in run_log
    assert raw_controls(run_log) == []
    assert len(run_log) < 300_000  # each record cut, the count of the rest kept: "... [N more characters]"
    assert "more characters]" in run_log
    assert raw_controls(printed.err) == [] and raw_controls(printed.out) == []
    # The masked causes (each rollout's error, its first line) as written: the markup is no link.
    causes = [line for line in printed.out.splitlines() if re.match(r"  \d x dial env_response failed", line)]
    assert len(causes) == 2 and all(f"RuntimeError: {MARKUP} " in cause for cause in causes), printed.out


def test_masked_causes_print_as_written_on_a_terminal() -> None:
    console = recording_console()
    print_masked(console, {"masked": 3, "rollouts": 4, "masked_causes": {HOSTILE: 2, "x" * 5_000: 1}})
    shown = console.export_text()
    assert f"2 x {MARKUP} red click  bell<U+0007>  nul<U+0000> <U+0085> <U+202E>evil<U+202C>" in shown
    assert raw_controls(shown) == [] and "<a href" not in console.export_html()
    assert "1 x " + "x" * 300 + " ... [4700 more characters]" in shown


def test_log_lines_on_the_console_and_in_run_log_are_inert(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = logging.getLogger("air.env.core")
    with console_lines(), log_file(tmp_path / "run.log"):
        try:
            raise RuntimeError(HOSTILE)
        except RuntimeError as exc:
            for _ in range(2):  # the second is counted, then named again at the end
                log.warning("rollout of %s masked: %s", "laneMerge", exc, exc_info=exc)
    err = capsys.readouterr().err
    run_log = (tmp_path / "run.log").read_text()
    assert err.count("rollout of laneMerge masked: [link=https://example.com]x[/link]") == 2, err
    assert "(x2 in all; each one is in run.log)" in err
    assert run_log.count(" red click  bell<U+0007>") == 4  # message and traceback, twice
    assert raw_controls(err) == [] and raw_controls(run_log) == []


def test_the_wandb_samples_table_gets_inert_commands_and_causes() -> None:
    reply = {"role": "assistant", "content": f"Run it.\n```bash\necho '{HOSTILE}'\n```"}
    masked = {
        "example_id": 0,
        "reward": 0.0,
        "completion": [reply],
        "error": {"error": "EnvFault", "error_chain_repr": f"EnvFault('the container said {HOSTILE}')"},
    }
    (row,) = sample_rows([masked])
    assert row.commands.startswith(f"$ echo '{MARKUP} red click") and raw_controls(row.commands) == []
    assert row.error.startswith(f"the container said {MARKUP} red click") and raw_controls(row.error) == []


def test_the_demos_reasons_show_the_baselines_output_inert() -> None:
    console = recording_console()
    detail = f"`python baseline.py` exited with 1:\n{HOSTILE}\nlast line"
    print_results([DemoResult("laneMerge", "failed", detail=detail)], console, "air-mlgym:test")
    shown = console.export_text()
    assert f"exited with 1:\n{MARKUP} red click" in shown and "\nlast line" in shown
    assert raw_controls(shown) == [] and "<a href" not in console.export_html()


def test_a_commands_error_is_printed_inert(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """`air: error: ...` quotes what failed: a replayed trajectory's text, a container's output."""
    import air.cli.main as cli

    def fails(args: object) -> int:
        raise CommandError(f"the replay failed: {HOSTILE}\nsecond line")

    parser = cli.build_parser()
    parser.set_defaults(func=fails)
    monkeypatch.setattr(cli, "build_parser", lambda: parser)
    assert cli.main([]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"air: error: the replay failed: {MARKUP} red click") and err.endswith("\nsecond line\n")
    assert raw_controls(err) == []


def test_a_replays_notes_and_title_print_inert() -> None:
    from air.runs.replay import render_comparison

    console = recording_console()
    comparison = {
        "path": "/runs/r.json",
        "task": f"dial{HOSTILE}",
        "commands": 1,
        "metric": "score",
        "recorded": [0.5],
        "replayed": [0.5],
        "matches": [True],
        "notes": [f"the recorded image {HOSTILE} is not on this machine"],
        "checkout_differences": [],
        "reproduced": True,
        "tolerance": 1e-6,
        "evaluation_seed": 1,
        "image": "air-sandbox:x",
    }
    render_comparison(comparison, console)
    shown = console.export_text()
    assert f"note: the recorded image {MARKUP} red click" in shown and f"(dial{MARKUP} red click" in shown
    assert raw_controls(shown) == [] and "<a href" not in console.export_html()
