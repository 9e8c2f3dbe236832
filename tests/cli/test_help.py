"""`air COMMAND --help` tells a new user enough: every command has a description, every option a help
line, and an option with a default says it."""

from __future__ import annotations

import argparse

from air.cli.main import build_parser


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


def test_every_command_has_a_description() -> None:
    missing = [name for name, sub in _subcommands().items() if not (sub.description or "").strip()]
    assert not missing, f"commands without a description: {missing}"


def test_every_option_has_help_and_says_its_default() -> None:
    problems = []
    for name, sub in _subcommands().items():
        for action in sub._actions:
            if isinstance(action, argparse._HelpAction):
                continue
            label = f"air {name} {'/'.join(action.option_strings) or action.dest}"
            if not (action.help or "").strip():
                problems.append(f"{label}: no help")
                continue
            has_default = action.default not in (None, False, argparse.SUPPRESS, [])
            if action.option_strings and has_default:
                text = " ".join(sub.format_help().split())  # what --help prints, unwrapped
                if "default" not in (action.help or "") and f"(default: {action.default})" not in text:
                    problems.append(f"{label}: default {action.default!r} not shown")
    assert not problems, "\n".join(problems)


def test_air_view_example_points_at_where_runs_go() -> None:
    text = _subcommands()["view"].format_help()
    assert "runs/standalone/trajectories" not in text
    assert "outputs/standalone" in " ".join(text.split())
