"""Where a run's log lines go: all of them, tracebacks included, to the run's ``run.log``; on the console
only warnings and errors, one line each (the chain behind a line is in the file), and a line that comes
again (the same cause in every rollout: a dead endpoint, a full disk) once, with its count at the end.
A ``run.log`` the disk stops taking says so once on the console and takes nothing more. Both show each line
neutral (air.sandbox.neutral): a record may carry a container's output or the model's words."""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

from air.sandbox.neutral import NeutralFormatter, neutral

# Loggers whose INFO lines belong in the run's file; other libraries' (httpx logs every request) only
# from WARNING up.
OUR_LOGGERS = ("air", "verifiers", "simple_env", "air_mlgym")


class _OursAtInfo(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.name.split(".")[0] in OUR_LOGGERS


class OneLineFormatter(logging.Formatter):
    """A record's first line, without its traceback."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {first_line(record.getMessage())}"


class _CurrentStderr(logging.StreamHandler):
    """Writes to ``sys.stderr`` as it is when a line is written (rich's progress bar swaps it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.setStream(sys.stderr)
        super().emit(record)


CONSOLE_LIMIT = 2_000  # one console line of a log record; run.log has the whole record

# What differs between two lines of one cause: a file's path (a rollout's own trajectory), a hex id.
_PATH = re.compile(r"(?<![\w.])/[^\s'\"),;]+")
_HEX_ID = re.compile(r"\b[0-9a-f]{8,}\b")


def first_line(message: str) -> str:
    """A message's first line as the console shows it: neutral, cut at a line's length."""
    return neutral((message.splitlines() or [""])[0], limit=CONSOLE_LIMIT)


def cause_of(message: str) -> str:
    """A log line's cause: its first line, paths and ids left out."""
    first = (message.splitlines() or [""])[0]
    return _HEX_ID.sub("<id>", _PATH.sub("<path>", first))


class RepeatsCounted(logging.Filter):
    """Lets each cause through once and counts the rest (run.log, its own handler, keeps every line)."""

    def __init__(self) -> None:
        super().__init__()
        self.counts: Counter[tuple[str, str]] = Counter()
        self.first: dict[tuple[str, str], str] = {}

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.levelname.lower(), cause_of(record.getMessage()))
        self.counts[key] += 1
        self.first.setdefault(key, first_line(record.getMessage()))
        return self.counts[key] == 1

    def repeated(self) -> list[str]:
        """One line per cause that came more than once, with its count."""
        return [
            f"{level}: {self.first[(level, cause)]} (x{count} in all; each one is in run.log)"
            for (level, cause), count in self.counts.items()
            if count > 1
        ]


class _RunLogFile(logging.FileHandler):
    """``run.log``; when the disk refuses it (full, read-only), one console line and no more writes,
    instead of logging's "--- Logging error ---" and a traceback for every line that follows."""

    def __init__(self, path: Path) -> None:
        super().__init__(path, encoding="utf-8")
        self.broken = False

    def emit(self, record: logging.LogRecord) -> None:
        if not self.broken:
            super().emit(record)

    def handleError(self, record: logging.LogRecord) -> None:  # noqa: N802 (logging's name)
        if self.broken:
            return
        self.broken = True
        error = sys.exc_info()[1]
        why = getattr(error, "strerror", None) or error
        # Through the loggers, so the console handler prints it; this handler takes nothing more.
        logging.getLogger(__name__).warning(
            "%s cannot be written (%s): the rest of this run's log is lost", self.baseFilename, why
        )

    def close(self) -> None:
        try:
            super().close()
        except OSError:  # the last lines did not fit either: they are lost, and closing must not raise
            self.stream = None  # type: ignore[assignment]
            logging.Handler.close(self)


def _targets() -> list[logging.Logger]:
    # verifiers' logger does not propagate to the root: it gets the handlers too.
    return [logging.getLogger(), logging.getLogger("verifiers")]


@contextlib.contextmanager
def log_file(path: Path) -> Iterator[None]:
    """Everything worth keeping of a run, at INFO and up with tracebacks, into ``path`` while it runs."""
    handler = _RunLogFile(path)
    handler.setLevel(logging.INFO)
    handler.addFilter(_OursAtInfo())
    handler.setFormatter(NeutralFormatter())
    with _attached(handler, logging.INFO):
        yield


@contextlib.contextmanager
def console_lines() -> Iterator[None]:
    """Warnings and errors on stderr, one line each, each cause once; at the end, the count of each
    cause that came again."""
    handler = _CurrentStderr()
    handler.setLevel(logging.WARNING)
    handler.setFormatter(OneLineFormatter())
    repeats = RepeatsCounted()
    handler.addFilter(repeats)
    try:
        with _attached(handler, logging.WARNING):
            yield
    finally:
        for line in repeats.repeated():
            print(line, file=sys.stderr)


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
