"""The escaping behind every label, caption and alert of the viewer (air/viewer/plain.py), checked fast:
rendered by a CommonMark parser (markdown-it-py, which rich brings), then searched with the patterns
Streamlit's Markdown applies to the rendered text (its GitHub autolinks, :emoji:, :streamlit: and material
icons, copied from its frontend bundle). test_viewer_plain_text.py checks the same in a real browser."""

from __future__ import annotations

import contextlib
import html
import re

import pytest
from markdown_it import MarkdownIt

from air.env.trajectories import Turn, TurnEvaluation
from air.viewer.plain import JOINER, code_block, code_span, escape_markdown
from air.viewer.rollout_page import _turn_title

MD = MarkdownIt("commonmark").enable("strikethrough")
# Streamlit 1.67's StreamlitMarkdown bundle: text-node patterns (found after escapes are resolved) ...
STREAMLIT_TEXT_PATTERNS = [
    re.compile(r"(https?://|www(?=\.))([-.\w]+)([^ \t\r\n]*)", re.IGNORECASE | re.ASCII),
    re.compile(r"(?<![^\s!-/:-@\[-`{-~])([-.\w+]+)@([-\w]+(?:\.[-\w]+)+)", re.ASCII),  # email, after ^|\s|\p{P}
    re.compile(r":(?!material/|streamlit:)[\w+-][\w_+-]*:", re.ASCII),  # emoji shortcodes
    re.compile(r":material_(\w+):", re.ASCII),
    re.compile(r":streamlit:"),
]
# ... and its rewrite of the source before parsing, inside code too.
SOURCE_REWRITE = ":material/"

HOSTILE = [
    "validate: score **4.9990** https://example.com/x <b>bold</b> [link](https://evil.example)",
    "www.evil.example WWW.Evil.Example root@evil.example HTTP://X.example",
    "![pic](https://evil.example/p.png) :red[red] $x^2$ $$y$$ &amp; &#x41; `tick` :material/home: :smile:",
    "# heading",
    "- item",
    "1. item",
    "> quote",
    "<script>alert(1)</script> <a href='https://evil.example'>a</a>",
    "a\\*b\\ trailing backslash\\",
    "__under__ ~~strike~~ *em* _em_ | table | cell |",
    "line one\nline two\r\nline three\rfour",
    ":streamlit: x@y.zz mailto:x@y.zz",
]


def _rendered_text(markdown: str) -> str:
    """The text a Markdown line renders to, or the rendered HTML itself where it made any element."""
    rendered = MD.renderInline(markdown)
    assert "<" not in rendered, rendered  # no element at all: markdown-it escapes text's own "<" as &lt;
    return html.unescape(rendered)


@pytest.mark.parametrize("text", HOSTILE)
def test_escaped_text_renders_as_itself_and_starts_no_link_or_shortcode(text: str) -> None:
    escaped = escape_markdown(text)
    assert "\n" not in escaped and "\r" not in escaped
    assert SOURCE_REWRITE not in escaped
    shown = _rendered_text(escaped)
    assert shown.replace(JOINER, "") == re.sub(r"\r\n|\r|\n", " ", text)
    for pattern in STREAMLIT_TEXT_PATTERNS:
        assert not pattern.search(shown), (pattern.pattern, shown)


def test_the_viewers_own_words_get_no_joiner() -> None:
    """A joiner only where a link or shortcode could start: "validate: score 0.5" reads (and is found) as is."""
    assert escape_markdown("validate: score 0.5000 (baseline 0.5)").count(JOINER) == 0
    assert escape_markdown("a:b c@d www.e").count(JOINER) == 3


@pytest.mark.parametrize(
    "text", [*HOSTILE, "`", "``", "a ` b `` c", "`starts", "ends`", " spaced ", "```` fence ````", " ` "]
)
def test_a_code_span_shows_its_text_literally_on_one_line(text: str) -> None:
    span = code_span(text)
    assert "\n" not in span and "\r" not in span and SOURCE_REWRITE not in span
    tokens = MD.parseInline(span)[0].children
    assert [t.type for t in tokens] == ["code_inline"], span
    expected = re.sub(r"\r\n|\r|\n", " ↵ ", text)
    assert tokens[0].content.replace(JOINER, "") == expected


@pytest.mark.parametrize("text", ["", "   "])
def test_an_empty_code_span_says_so(text: str) -> None:
    assert _rendered_text(code_span(text)) == "(empty)"


@pytest.mark.parametrize(
    "text", [*HOSTILE, "```\n# not a heading\n```", "    ```\n~~~\n", "````\nx\n`````", "a\n\n\nb", "ends\n"]
)
def test_a_code_block_in_an_alert_shows_its_text_literally(text: str) -> None:
    tokens = MD.parse("Format error:" + code_block(text))
    assert [t.type for t in tokens] == ["paragraph_open", "inline", "paragraph_close", "fence"]
    assert tokens[3].info == ""
    assert tokens[3].content.replace(JOINER, "") == re.sub(r"\r\n|\r", "\n", text) + "\n"


def test_bidirectional_controls_show_as_code_points() -> None:
    """U+202E would draw "echo \u202e0999.4 :erocs" as a score: it shows as <U+202E> instead."""
    text = "echo \u202e0999.4 :erocs \u2066x\u2069"
    for rendered in (escape_markdown(text), code_span(text), code_block(text)):
        assert not re.search("[\u202a-\u202e\u2066-\u2069]", rendered)
    assert "<U+202E>0999.4" in MD.parseInline(code_span(text))[0].children[0].content


def test_a_title_sets_the_command_in_code_apart_from_the_viewers_mark() -> None:
    command = "validate: score **4.9990** https://example.com/x ``a`` <b>b</b>\nsecond line"
    turn = Turn(index=2, model_text="", command=command, evaluation=TurnEvaluation(status="ok", score=0.5, metrics={}))
    rendered = MD.renderInline(_turn_title(turn, 3))
    assert rendered.startswith("<strong>Step 2 of 3</strong>: <code>")
    code = re.search("<code>(.*)</code>", rendered).group(1)
    assert html.unescape(code) == command.splitlines()[0]
    assert rendered.endswith("</code> — validate: score 0.5000")


def test_an_evaluation_error_stays_out_of_the_title() -> None:
    failed = TurnEvaluation(status="evaluation_failed", score=None, metrics=None, error="score 9.99 **forged**")
    title = _turn_title(Turn(index=1, model_text="", command="validate", evaluation=failed), 1)
    assert "forged" not in title and MD.renderInline(title).endswith("</code> — validate: evaluation_failed")


# Issue 62: what a terminal would obey (colours, OSC 8 links, a title), C0 and C1 controls, invisible marks.
TERMINAL = "score \x1b[31m4.99\x1b[0m \x1b]8;;http://evil.example\x07click\x1b]8;;\x07 bell\x07 nul\x00 zw\u200b \x9b2J"
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b\u202a-\u202e]")


def test_terminal_escapes_and_controls_never_reach_a_label_or_alert() -> None:
    for rendered in (escape_markdown(TERMINAL), code_span(TERMINAL), code_block(TERMINAL)):
        assert not RAW.search(rendered) and "evil.example" not in rendered, rendered
    assert (
        "score 4.99 click bell<U+0007> nul<U+0000> zw<U+200B>"
        in MD.parseInline(code_span(TERMINAL))[0].children[0].content
    )


def test_a_steps_code_blocks_show_the_agents_text_inert(monkeypatch: pytest.MonkeyPatch) -> None:
    """Model reply, command and output go to st.code, which shows text as it is: there too, one neutraliser."""
    from types import SimpleNamespace

    import air.viewer.rollout_page as page

    shown: list[str] = []

    class Page:  # what _turn_body calls on Streamlit, recording the code blocks
        def __getattr__(self, name: str):
            def call(*args: object, **kwargs: object) -> object:
                if name == "code":
                    shown.append(str(args[0]))
                return SimpleNamespace(__enter__=lambda: None, __exit__=lambda *a: None)

            return call

        def expander(self, *args: object, **kwargs: object):
            return contextlib.nullcontext()

    monkeypatch.setattr(page, "st", Page())
    hostile = f"{TERMINAL} \u202eevil"
    turn = Turn(index=1, model_text=f"<think>{hostile}</think>{hostile}", command=hostile, output=hostile)
    page._turn_body(turn, SimpleNamespace(baseline=SimpleNamespace(score=None)))
    assert len(shown) == 4  # reasoning, reply, command, output
    for text in shown:
        assert not RAW.search(text) and "evil.example" not in text and "<U+202E>evil" in text, text
