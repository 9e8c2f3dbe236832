"""`air view --help` names the argument as its description does (optional: the last `uv run rl`'s folder) and
says where it listens by default."""

from __future__ import annotations

import argparse

from air.cli.main import build_parser


def _view_help() -> str:
    [action] = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return " ".join(action.choices["view"].format_help().split())


def test_view_help_names_dir_and_shows_the_host_default() -> None:
    text = _view_help()
    assert text.startswith("usage: air view [-h] [--host HOST] [--port PORT] [--browser] [DIR] ")
    assert "none: the folder of the last `uv run rl` on this machine" in text
    assert "(default: 127.0.0.1)" in text
    assert "outputs/standalone" in text
