"""The one neutraliser (air/sandbox/neutral.py) every exit of the agent's text calls: no control, format or
bidirectional character and no terminal escape gets through, Rich markup shows as written, the length is
capped, and plain text passes unchanged."""

from __future__ import annotations

import io
import logging
import sys
import time
import unicodedata

import pytest
from hypothesis import example, given
from hypothesis import strategies as st
from rich.console import Console
from rich.text import Text

from air.sandbox.neutral import LOG_FORMAT, NeutralFormatter, log_to_stderr, neutral, neutral_record

INVISIBLE_CATEGORIES = {"Cc", "Cf", "Cs", "Zl", "Zp"}
# Escape sequences, C0 and C1 controls, bidirectional overrides, Rich markup: what the red team sent.
HOSTILE = (
    "score \x1b[31m4.99\x1b[0m \x1b]8;;http://evil.example\x07click\x1b]8;;\x07 \x1b]0;title\x1b\\ \x1b]52;c;eA==\x07"
    " \x9b2J\x9d8;;http://c1.example\x9c bell\x07 back\x08 nul\x00 del\x7f \x85nel \u202eevil\u202c \u2066iso\u2069"
    " zw\u200b bom\ufeff ls\u2028ps\u2029 tag\U000e0041 [link=https://example.com]x[/link] [bold red]loud[/bold red]"
    " \\[escaped] trailing\\"
)
ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()), max_size=300)  # surrogates too


def raw_controls(text: str, allowed: str = "") -> list[str]:
    """The invisible or layout-changing characters left in ``text``, less ``allowed``."""
    return [c for c in text if unicodedata.category(c) in INVISIBLE_CATEGORIES and c not in allowed]


def test_the_red_teams_text_comes_out_inert() -> None:
    one_line = neutral(HOSTILE)
    assert raw_controls(one_line) == [] and "\n" not in one_line
    assert "evil.example" not in one_line and "c1.example" not in one_line and "title" not in one_line  # dropped
    assert "score 4.99 click " in one_line  # colours and links gone, the words kept
    assert "bell<U+0007> back<U+0008> nul<U+0000> del<U+007F> <U+0085>nel <U+202E>evil<U+202C>" in one_line
    assert "ls<U+2028>ps<U+2029> tag<U+E0041>" in one_line
    assert "[link=https://example.com]x[/link] [bold red]loud[/bold red]" in one_line  # without markup: as is


def test_line_breaks_stay_only_where_the_place_has_lines() -> None:
    text = "one\r\ntwo\rthree\nfour\tfive"
    assert neutral(text, lines=True) == "one\ntwo\nthree\nfour\tfive"  # a bare \r would draw over "two"
    assert neutral(text) == "one ↵ two ↵ three ↵ four five"


def test_markup_renders_as_written_on_a_rich_console() -> None:
    console = Console(file=io.StringIO(), record=True, force_terminal=True, color_system="truecolor", width=400)
    console.print(f"cause: {neutral(HOSTILE, markup=True)}", emoji=False)
    shown = console.export_text()
    assert "[link=https://example.com]x[/link] [bold red]loud[/bold red] \\[escaped] trailing\\" in shown
    assert "<a href" not in console.export_html()  # no link anywhere
    assert raw_controls(shown, "\n") == []


@given(ANY_TEXT, st.booleans())
def test_no_invisible_character_gets_through(text: str, lines: bool) -> None:
    assert raw_controls(neutral(text, lines=lines), "\n\t" if lines else "") == []


@given(ANY_TEXT)
@example("\\")  # rich's own escape doubles a trailing backslash
@example("tail\\\\")
def test_markup_escaped_text_renders_as_the_unescaped_text(text: str) -> None:
    assert Text.from_markup(neutral(text, markup=True), emoji=False).plain == neutral(text)


@given(ANY_TEXT, st.integers(min_value=1, max_value=60), st.booleans())
def test_the_length_is_capped(text: str, limit: int, lines: bool) -> None:
    assert len(neutral(text, limit=limit, lines=lines)) <= limit + len(f" ... [{len(text)} more characters]")


def test_a_cut_says_how_much_more_there_was() -> None:
    assert neutral("a" * 30, limit=10) == "a" * 10 + " ... [20 more characters]"
    assert neutral("a\n" * 15, limit=10, lines=True) == "a\na\na\na\na\n" + "\n... [20 more characters]"
    assert neutral("\x00" * 30, limit=10) == "<U+0000> ... [29 more characters]"  # a marker is never split


@given(st.text(st.characters(exclude_categories=tuple(INVISIBLE_CATEGORIES)), max_size=200))
def test_plain_text_passes_unchanged(text: str) -> None:
    assert neutral(text) == text == neutral(text, lines=True)


def test_every_invisible_code_point_of_unicode_is_shown() -> None:
    """The module's list of code points against this Python's unicodedata."""
    missed = [
        f"U+{cp:04X}"
        for cp in range(sys.maxunicode + 1)
        if unicodedata.category(chr(cp)) in INVISIBLE_CATEGORIES
        and chr(cp) not in "\n\r\t"  # line breaks and tabs have their own rules
        and neutral(chr(cp)) != f"<U+{cp:04X}>"
    ]
    assert missed == []


@pytest.mark.parametrize("unit", ["\x9d", "\x1b]", "\x1b[", "\x1b[1;2;3", "\x90x"])
def test_many_unterminated_sequences_cost_linear_time(unit: str) -> None:
    text = unit * (1_000_000 // len(unit))
    started = time.monotonic()
    neutral(text, limit=len(text))
    assert time.monotonic() - started < 20  # quadratic would be hours


def test_the_log_formatter_neutralises_message_and_traceback() -> None:
    try:
        raise RuntimeError(f"the container said: {HOSTILE}")
    except RuntimeError:
        record = logging.getLogger("air.env.core").makeRecord(
            "air.env.core",
            logging.INFO,
            __file__,
            1,
            "rollout of %s masked: %s",
            ("laneMerge", HOSTILE),
            sys.exc_info(),
        )
    line = NeutralFormatter(LOG_FORMAT, limit=5_000).format(record)
    assert raw_controls(line, "\n") == []
    assert "rollout of laneMerge masked: score 4.99" in line and "RuntimeError: the container said: score" in line
    copy = neutral_record(record)
    assert raw_controls(logging.Formatter().format(copy), "\n") == [] and "<U+202E>evil" in copy.getMessage()
    assert record.getMessage() == f"rollout of laneMerge masked: {HOSTILE}"  # the original is left as it was
    huge = logging.makeLogRecord({"msg": "x" * 100_000})
    assert len(NeutralFormatter(limit=5_000).format(huge)) < 5_100


def test_log_to_stderr_gives_the_root_neutral_lines(capsys: pytest.CaptureFixture[str]) -> None:
    root = logging.getLogger()
    saved = root.handlers[:], root.level
    root.handlers = []
    try:
        log_to_stderr(logging.INFO)
        logging.getLogger("air.env.core").info("rollout of %s masked: %s", "laneMerge", HOSTILE)
    finally:
        for handler in root.handlers:
            handler.close()
        root.handlers, root.level = saved
    err = capsys.readouterr().err
    assert "rollout of laneMerge masked: score 4.99 click" in err and raw_controls(err, "\n") == []
