"""The rich Console every command prints through.

On a terminal rich wraps at its width. Piped or redirected, rich assumes 80 columns and would break
lines mid-phrase and mid-word (a path, a table's title, a progress line): there a line stays whole (the
reader's pager or editor wraps it) and tables take the width their content needs, unless $COLUMNS says
how wide to be.
"""

from __future__ import annotations

import os
from typing import Any

from rich.console import Console

PIPE_WIDTH = 10_000  # "no limit" for tables and rules; printed lines do not wrap at all (soft_wrap)


def output_console(**kwargs: Any) -> Console:
    """``Console(**kwargs)``, which on no terminal soft-wraps and is as wide as $COLUMNS, else unlimited."""
    return fit_to_output(Console(**kwargs), width_given="width" in kwargs)


def fit_to_output(console: Console, width_given: bool = False) -> Console:
    """``console`` made so (in place): on a terminal it is left as it is."""
    if not console.is_terminal:
        console.soft_wrap = True
        if not width_given and not os.environ.get("COLUMNS", "").strip().isdigit():
            console.width = PIPE_WIDTH
    return console
