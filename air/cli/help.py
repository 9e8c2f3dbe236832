"""How ``air`` help reads: every option says its default, unless it has none worth saying."""

from __future__ import annotations

import argparse


class DefaultsHelpFormatter(argparse.HelpFormatter):
    """argparse's ArgumentDefaultsHelpFormatter without "(default: None)" and "(default: False)": an
    option with no value by default says in its own help what happens without it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        help_text = action.help or ""
        if "%(default)" in help_text or "default:" in help_text or not action.option_strings:
            return help_text
        if action.default is None or action.default is False or action.default is argparse.SUPPRESS:
            return help_text
        if action.default == []:  # an append option starts empty
            return help_text
        return f"{help_text} (default: %(default)s)"
