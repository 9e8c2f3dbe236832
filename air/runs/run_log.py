"""Where a run's log lines go: all of them, tracebacks included, to the run's ``run.log``; on the console
only warnings and errors, one line each (the chain behind a line is in the file)."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

# Loggers whose INFO lines belong in the run's file; other libraries' (httpx logs every request) only
# from WARNING up.
OUR_LOGGERS = ("air", "verifiers", "simple_env", "air_mlgym")
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class _OursAtInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".")[0] in OUR_LOGGERS


class OneLineFormatter(logging.Formatter):
    """A record's first line, without its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        lines = record.getMessage().splitlines() or [""]
        return f"{record.levelname.lower()}: {lines[0]}"


class _CurrentStderr(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a line is written (rich's progress bar swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stderr)
        super().emit(record)


def _targets() -> list[logging.Logger]:
    # verifiers' logger does not propagate to the root: it gets the handlers too.
    return [logging.getLogger(), logging.getLogger("verifiers")]


@contextlib.contextmanager
def log_file(path: Path) -> Iterator[None]:
    """Everything worth keeping of a run, at INFO and up with tracebacks, into ``path`` while it runs."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setLevel(logging.INFO)
    handler.addFilter(_OursAtInfo())
    handler.setFormatter(logging.Formatter(_FORMAT))
    with _attached(handler, logging.INFO):
        yield


@contextlib.contextmanager
def console_lines() -> Iterator[None]:
    """Warnings and errors on stderr, one line each."""
    handler = _CurrentStderr()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(OneLineFormatter())
    with _attached(handler, logging.WARNING):
        yield


@contextlib.contextmanager
def _attached(handler: logging.Handler, level: int) -> Iterator[None]:
    loggers = _targets()
    levels = [logger.level for logger in loggers]
    for logger in loggers:
        logger.addHandler(handler)
        if logger.getEffectiveLevel() > level or logger.level == logging.NOTSET:
            logger.setLevel(min(level, logger.getEffectiveLevel()))
    try:
        yield
    finally:
        for logger, old in zip(loggers, levels, strict=True):
            logger.removeHandler(handler)
            logger.setLevel(old)
        handler.close()
