"""Text from the agent's side made inert on its way to a person: :func:`neutral`, the one function every exit
of such text calls (the console, run.log and the other log streams, W&B, the viewer's escaping).

Hostile is whatever came from a container or the model: command output, replies, and the error messages
that carry them. On its way out:

- terminal escape sequences (colours, OSC 8 links, window titles, clipboard writes) are dropped: they are
  formatting, never content, and a terminal or ``less -R`` would obey them;
- every other invisible or layout-changing code point shows as ``<U+XXXX>``: C0 and C1 controls, DEL,
  bidirectional overrides and isolates (text that would display in another order than its own),
  zero-width and other format characters, line and paragraph separators, lone surrogates;
- a line break is ``\\n`` where the place takes several lines (``\\r\\n`` and a bare ``\\r``, which would
  draw over the line before it, too), else `` ↵ ``; a tab stays only there too, else is a space;
- Rich markup is escaped where a Rich console reads it (``[link=...]`` would be a live link);
- the text is cut at ``limit`` characters, saying how many more there were.
"""

from __future__ import annotations

import logging
import re
import sys

LIMIT = 10_000
RECORD_LIMIT = 50_000  # a log record, traceback included: a chain of tracebacks fits, a pasted megabyte does not
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"

# Strings (OSC, DCS, SOS, PM, APC) up to their terminator, CSI, and the short escapes. A string's body stops
# at the next introducer, so a text of many unterminated ones costs linear time.
_SEQUENCE = (
    r"(?:\x1b[\]PX^_]|[\x90\x98\x9d-\x9f])[^\x07\x1b\x90\x98\x9c-\x9f]*(?:\x07|\x1b\\|\x9c)"
    r"|(?:\x1b\[|\x9b)[0-?]*[ -/]*[@-~]"
    r"|\x1b[ -/]*[0-~]"
)
# Unicode's Cc, Cf, Cs, Zl and Zp (tests/sandbox/test_neutral.py checks this list against unicodedata).
_INVISIBLE = (
    "\x00-\x1f\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f"
    "\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f\ud800-\udfff"
)
_ANY_INVISIBLE = re.compile(f"[{_INVISIBLE}]")
_TOKEN = re.compile(f"({_SEQUENCE})|(\r\n?|\n)|([{_INVISIBLE}])|[^{_INVISIBLE}]+")


def neutral(text: object, *, limit: int = LIMIT, lines: bool = False, markup: bool = False) -> str:
    """``text`` as a person may safely see it (see the module's doc): one line, or with ``lines`` several;
    Rich markup escaped with ``markup``; at most ``limit`` characters of it, then a note of how many more."""
    text = str(text)
    if len(text) <= limit and not _ANY_INVISIBLE.search(text):
        shown, used = text, len(text)
    else:
        shown, used = _cleaned(text, limit, lines)
    if markup:
        from rich.markup import escape  # only the console's callers pay for rich

        # Rich's escape doubles one trailing backslash, shown twice at the end of a line: kept out of it, the
        # backslashes stay as written. (So put the text last in a markup line, never just before a tag.)
        body = shown.rstrip("\\")
        shown = escape(body) + shown[len(body) :]
    if used < len(text):
        shown += ("\n" if lines else " ") + f"... [{len(text) - used} more characters]"
    return shown


def _cleaned(text: str, limit: int, lines: bool) -> tuple[str, int]:
    """The shown text and how many characters of ``text`` it covers."""
    pieces: list[str] = []
    size = used = 0
    # Looked at no further than a cut could need: escape sequences shrink, markers grow.
    for match in _TOKEN.finditer(text, 0, min(len(text), 4 * limit + 64)):
        sequence, line_break, control = match.groups()
        if sequence is not None:
            piece = ""
        elif line_break is not None:
            piece = "\n" if lines else " ↵ "
        elif control is not None:
            piece = ("\t" if lines else " ") if control == "\t" else f"<U+{ord(control):04X}>"
        else:
            piece = match.group()
        if size + len(piece) > limit:
            if sequence is None and line_break is None and control is None:  # plain text: what fits of it
                pieces.append(piece[: limit - size])
                used = match.start() + limit - size
            break
        pieces.append(piece)
        size += len(piece)
        used = match.end()
    return "".join(pieces), used


class NeutralFormatter(logging.Formatter):
    """logging's lines with each record neutral, message and traceback alike: for run.log and any stream a
    person reads (a record may carry a container's output or the model's words)."""

    def __init__(self, fmt: str = LOG_FORMAT, limit: int = RECORD_LIMIT) -> None:
        super().__init__(fmt)
        self.limit = limit

    def format(self, record: logging.LogRecord) -> str:
        return neutral(super().format(record), lines=True, limit=self.limit)


def neutral_record(record: logging.LogRecord) -> logging.LogRecord:
    """A copy of ``record`` with its message and traceback neutral, for handlers whose formatter is not ours
    (a host program's)."""
    copy = logging.makeLogRecord(record.__dict__)
    copy.msg, copy.args = neutral(record.getMessage(), lines=True, limit=RECORD_LIMIT), None
    if record.exc_info or record.exc_text:
        chain = record.exc_text or logging.Formatter().formatException(record.exc_info)  # type: ignore[arg-type]
        copy.exc_info, copy.exc_text = None, neutral(chain, lines=True, limit=RECORD_LIMIT)
    if record.stack_info:
        copy.stack_info = neutral(record.stack_info, lines=True, limit=RECORD_LIMIT)
    return copy


def log_to_stderr(level: int = logging.INFO) -> None:
    """``logging.basicConfig`` on stderr with each line neutral: for the processes whose logs carry agent
    text (env servers, fleet nodes)."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(NeutralFormatter())
    logging.basicConfig(level=level, handlers=[handler])
