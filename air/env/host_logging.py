"""Our log records inside a program that set up verifiers' logging and not ours (vf-eval, prime-rl's env
servers): they go where that program sends verifiers' own records.

Such a program gives verifiers' logger its handlers and stops it propagating, and leaves the root bare.
A warning of ours then finds no handler: Python prints its bare message wherever stderr's cursor is
(the classic vf-eval: glued to tqdm's bar), or, where the program switched that fallback off (vf-eval
0.4.0 under its dashboard), only 'No handlers could be found for logger "air.sandbox.storage"'.
The fronts call :func:`follow` with the logger their verifiers configures. What they get is neutral
(air.sandbox.neutral): a record may carry a container's output or the model's words, and the host's own
formatter would pass them on as they are.
"""

from __future__ import annotations

import logging
import sys

from air.sandbox.neutral import neutral_record

OURS = "air"


class HostHandler(logging.Handler):
    """Hands our records to ``library``'s handlers when the root has none; where the program configured
    neither, writes a warning as one line of its own (above tqdm's bars, if any are drawn)."""

    def __init__(self, library: str) -> None:
        super().__init__()
        self.library = library

    def emit(self, record: logging.LogRecord) -> None:
        if logging.getLogger().handlers:  # the program logs through the root (air standalone's run.log): ours go there
            return
        host = [h for h in logging.getLogger(self.library).handlers if not isinstance(h, logging.NullHandler)]
        if not host and record.levelno < logging.WARNING:
            return
        try:
            record = neutral_record(record)
        except Exception:  # a record whose arguments do not fit its message: logging's own report of it
            self.handleError(record)
            return
        for handler in host:
            if record.levelno >= handler.level:
                handler.handle(record)
        if not host:
            _write_line(f"{record.levelname.lower()}: {record.getMessage()}")


def _write_line(line: str) -> None:
    tqdm = sys.modules.get("tqdm")
    bars = getattr(getattr(tqdm, "tqdm", None), "_instances", None)
    if bars:  # a line written over a bar would be glued to it
        tqdm.tqdm.write(line, file=sys.stderr)
    else:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


def follow(library: str) -> None:
    """Route the ``air`` loggers' records to ``library``'s handlers (once per process)."""
    logger = logging.getLogger(OURS)
    if not any(isinstance(h, HostHandler) for h in logger.handlers):
        logger.addHandler(HostHandler(library))
