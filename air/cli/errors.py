"""The one error the command line prints as a line, not a traceback."""

from __future__ import annotations


class CommandError(Exception):
    """A failure the user can act on: printed as ``air: error: <message>``, exit status 1."""
