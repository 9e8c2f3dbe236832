"""Recorded text in Streamlit's Markdown, shown as itself: every string the viewer puts into a label, header,
caption or alert passes through one of these (long text goes to ``st.code``/``st.text`` instead).

Streamlit renders labels, captions and alerts as Markdown with extras, and backslash escapes alone do not
stop them: GitHub's autolinks (``https://``, ``www.``, ``a@b.c``), ``:emoji:``, ``:streamlit:`` and
``:material/icon:`` are found in the text *after* escapes are resolved, and ``:material/`` is rewritten in
the source before parsing, even inside code. So escaping also puts an invisible word joiner (U+2060) where
those patterns would match, and code keeps the joiner in ``:material/``. Bidirectional controls, which
would let text display in an order other than its own, are shown as ``<U+202E>``.
"""

from __future__ import annotations

import re

JOINER = "\u2060"  # zero-width, not a letter: the autolink and shortcode patterns stop at it
_PUNCTUATION = re.compile(r"([!-/:-@\[-`{-~])")  # every ASCII punctuation mark: CommonMark escapes them all
_LINK_STARTS = re.compile(r"(?<=[:@])(?=\S)|(?i:(?<=www)(?=\.))")  # ": " and "@ " start nothing
_MATERIAL = re.compile(r":(?=material/)")
_BIDI = re.compile("[\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BACKTICKS = re.compile(r"`+")


def _visible_bidi(text: str) -> str:
    return _BIDI.sub(lambda m: f"<U+{ord(m.group()):04X}>", text)


def escape_markdown(text: str) -> str:
    """``text`` as one line of Markdown that renders as exactly that text (line breaks become spaces)."""
    broken = _LINK_STARTS.sub(JOINER, _LINE_BREAK.sub(" ", _visible_bidi(text)))
    return _PUNCTUATION.sub(r"\\\1", broken)


def code_span(text: str) -> str:
    """``text`` as inline code on one line (line breaks shown as ↵), literal whatever it holds: the fence is
    longer than any run of backticks in it, and the padding spaces are the ones CommonMark strips."""
    text = _MATERIAL.sub(":" + JOINER, _LINE_BREAK.sub(" ↵ ", _visible_bidi(text)))
    if not text.strip():
        return escape_markdown("(empty)")
    fence = "`" * (1 + max((len(run) for run in _BACKTICKS.findall(text)), default=0))
    return f"{fence} {text} {fence}"


def code_block(text: str) -> str:
    """``text`` as a fenced code block (to follow a line of the viewer's own words in an alert)."""
    text = _MATERIAL.sub(":" + JOINER, _LINE_BREAK.sub("\n", _visible_bidi(text)))
    fence = "`" * max(3, 1 + max((len(run) for run in _BACKTICKS.findall(text)), default=0))
    return f"\n\n{fence}\n{text}\n{fence}\n"
