"""Recorded text in Streamlit's Markdown, shown as itself: every string the viewer puts into a label, header,
caption or alert passes through one of these (long text goes to ``st.code`` instead, through ``literal``).

Streamlit renders labels, captions and alerts as Markdown with extras, and backslash escapes alone do not
stop them: GitHub's autolinks (``https://``, ``www.``, ``a@b.c``), ``:emoji:``, ``:streamlit:`` and
``:material/icon:`` are found in the text *after* escapes are resolved, and ``:material/`` is rewritten in
the source before parsing, even inside code. So escaping also puts an invisible word joiner (U+2060) where
those patterns would match, and code keeps the joiner in ``:material/``. Control and format characters are
the console's and the logs' business too: each function starts from ``neutral`` (air.sandbox.neutral), so
terminal escapes are dropped and bidirectional controls, which would let text display in an order other
than its own, show as ``<U+202E>``, as everywhere else.
"""

from __future__ import annotations

import re

from air.env import neutral

JOINER = "\u2060"  # zero-width, not a letter: the autolink and shortcode patterns stop at it
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation mark: CommonMark escapes them all
_LINK_STARTS = re.compile(r"(?<=[:@])(?=\S)|(?i:(?<=www)(?=\.))")  # ": " and "@ " start nothing
_MATERIAL = re.compile(r":(?=material/)")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BACKTICKS = re.compile(r"`+")


LIMIT = 20_000  # a label's or an alert's text; whole outputs go to st.code
CODE_LIMIT = 200_000  # a command's output, a reply: what a page can still show


def _neutral(text: str) -> str:
    return neutral(text, lines=True, limit=LIMIT)


def literal(text: str) -> str:
    """``text`` for ``st.code``, which shows it as it is: no terminal escapes, controls and bidirectional
    marks as ``<U+XXXX>`` (in a code block U+202E would still turn the text around)."""
    return neutral(text, lines=True, limit=CODE_LIMIT)


def escape_markdown(text: str) -> str:
    """``text`` as one line of Markdown that renders as exactly that text (line breaks become spaces)."""
    broken = _LINK_STARTS.sub(JOINER, _LINE_BREAK.sub(" ", _neutral(text)))
    return _PUNCTUATION.sub(r"\\\1", broken)


def code_span(text: str) -> str:
    """``text`` as inline code on one line (line breaks shown as ↵), literal whatever it holds: the fence is
    longer than any run of backticks in it, and the padding spaces are the ones CommonMark strips."""
    text = _MATERIAL.sub(":" + JOINER, _LINE_BREAK.sub(" ↵ ", _neutral(text)))
    if not text.strip():
        return escape_markdown("(empty)")
    fence = "`" * (1 + max((len(run) for run in _BACKTICKS.findall(text)), default=0))
    return f"{fence} {text} {fence}"


def code_block(text: str) -> str:
    """``text`` as a fenced code block (to follow a line of the viewer's own words in an alert)."""
    text = _MATERIAL.sub(":" + JOINER, _LINE_BREAK.sub("\n", _neutral(text)))
    fence = "`" * max(3, 1 + max((len(run) for run in _BACKTICKS.findall(text)), default=0))
    return f"\n\n{fence}\n{text}\n{fence}\n"
