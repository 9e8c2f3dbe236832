"""Model text -> exactly one command, or a format error worded for the agent.

A reply is free reasoning followed by one fenced code block holding one command::

    I will look at the data first.
    ```bash
    ls -la data/
    ```

Parsing, in order:

1. Thinking is removed (:func:`strip_think`): every ``<think>...</think>`` block (any case, any
   number, multi-line); a ``</think>`` with no opening tag drops everything before it (some chat
   templates put ``<think>`` in the prompt); an unclosed ``<think>`` makes the rest of the reply
   thinking.
2. Fenced blocks are found line by line (see :func:`_find_blocks`): a fence line is 3+ backticks
   or tildes, optionally indented, optionally followed by a language tag; the block ends at the
   next line holding only a fence of the same character, at least as long. Inside a block, a
   fence line *with* a language tag opens a nested block (markdown inside a heredoc), so its
   bare closing fence does not end the outer block; a longer outer fence (````) also works.
3. Exactly one block -> its content (surrounding blank lines removed, the fence's indentation
   removed, inner indentation kept) is the command. Blocks tagged ``bash``, ``sh``, ``shell``,
   ``console``, ``zsh`` or untagged are commands (``console``: a leading ``$ `` prompt is dropped).
   A ``python`` block is almost always a file body the model forgot to wrap: a format error that
   says how to write a file. Any other tag is a format error too (it is not a command). Zero
   blocks -> step 4; an empty block, several blocks or an unclosed block -> format error.
4. No block: a *bare command* is accepted when the whole remaining text is one line that looks
   like a command, not prose (:func:`looks_like_command`), or when it starts with one of
   ``multiline_commands`` (e.g. MLGym's ``edit 3:5`` ... ``end_of_edit``) and contains its
   terminator line. Otherwise: format error "no command found".

:func:`parse_action` never raises and runs in linear time.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass

logger = logging.getLogger(__name__)

SHELL_LANGUAGES = frozenset({"", "bash", "sh", "shell", "console", "zsh"})
PYTHON_LANGUAGES = frozenset({"python", "python3", "py", "ipython", "pycon"})

REPLY_FORMAT = """\
Reply format: reason in plain text as much as you need, then give exactly one command in one \
fenced code block, like this:

I will look at the data files first.
```bash
ls -la data/
```

The block's content is run as one command; nothing outside it is run. Put one command per reply \
(chain steps with && or write files with a heredoc inside the block). A reply with no block, \
an empty block or several blocks is a format error and runs nothing."""

# Tags are matched on their own (linear scan); the pairing happens in strip_think.
_THINK_TAG = re.compile(r"<\s*(/?)\s*think\s*>", re.IGNORECASE)
# A fence line: indentation, 3+ backticks or tildes, then an info string (language tag first).
_FENCE = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")
# A bare command's first word: a program, builtin or path (no quotes, no '=' or ':').
_PROGRAM = re.compile(r"^[A-Za-z0-9_./~+-]+$")
_CAPITALISED = re.compile(r"^[A-Z][a-z]+[.!?]?$")
# Capitalised words that start English sentences, rarely programs.
_SENTENCE_STARTERS = frozenset(
    """I I'll I'm Let Let's The Now First We This That It Next Then Okay OK Ok Sure So Here Based To My
    Finally Great Alright All Looking Since After Before Yes No Done Thanks Hmm Well In As If There A An
    You Your Our Its Once Good Perfect Nice Wait Also And But Or Note Please Given Using With For From
    What Why How When Where Which Who Check Run Try Looks Seems Step Plan Final Answer Command Action""".split()
)
MAX_BARE_WORDS_IF_PUNCTUATED = 3  # a longer line ending like a sentence ("... the files.") is prose


@dataclass(frozen=True)
class ParsedAction:
    """What one reply asks for."""

    command: str | None  # the one command to run (None on a format error)
    thought: str  # the reply's reasoning text (think blocks stripped, block removed)
    error: str | None = None  # format error message, worded for the agent (what was wrong, what to do)


def message_text(message: object) -> str:
    """The text of a chat message whose content is a string or a list of OpenAI content parts."""
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    if isinstance(content, list):
        return "".join(part.get("text") or "" for part in content if isinstance(part, dict))
    return content if isinstance(content, str) else ""


def format_error_observation(error: str) -> str:
    """The observation shown after a malformed reply: what was wrong, then the format again."""
    return (
        f"Format error: {error}\n"
        "Nothing was run. Reply with your reasoning, then exactly one command in one fenced block:\n"
        "```bash\n<command>\n```"
    )


def strip_think(text: str) -> str:
    """The reply without its thinking (see the module docstring, step 1)."""
    return _split_think(text)[0]


def split_think(text: str) -> tuple[str, str]:
    """(the reply without its thinking, the thinking), by the same rules as :func:`strip_think`."""
    visible, _, thinking = _split_think(text)
    return visible, "\n\n".join(part.strip() for part in thinking if part.strip())


def _split_think(text: str) -> tuple[str, bool, list[str]]:
    """(visible text, whether an unclosed ``<think>`` swallowed the rest, the thinking parts)."""
    visible: list[str] = []
    thinking: list[str] = []
    start = 0  # start of the current visible (or thinking) stretch
    inside = False
    for tag in _THINK_TAG.finditer(text):
        closing = tag.group(1) == "/"
        if inside:
            if closing:
                thinking.append(text[start : tag.start()])
                inside, start = False, tag.end()
            # a <think> inside thinking is just more thinking
        elif closing:
            # orphan </think>: everything before it was thinking
            thinking[:] = [_THINK_TAG.sub("", text[: tag.start()])]
            visible.clear()
            start = tag.end()
        else:
            visible.append(text[start : tag.start()])
            inside, start = True, tag.end()
    if inside:
        thinking.append(text[start:])
    else:
        visible.append(text[start:])
    return "".join(visible), inside, thinking


@dataclass(frozen=True)
class _Block:
    language: str
    content: str
    first_line: int  # index of the opening fence line
    last_line: int  # index of the closing fence line (len(lines) if unclosed)
    closed: bool


def _closes(line: str, char: str, length: int) -> bool:
    """Whether ``line`` is a bare closing fence for an opening fence of ``length`` ``char``s."""
    match = _FENCE.match(line)
    if not match or match.group(2)[0] != char or len(match.group(2)) < length:
        return False
    return not match.group(3).strip()


def _opening(line: str) -> tuple[int, str, str] | None:
    """(indent, fence, language) when ``line`` opens a block."""
    match = _FENCE.match(line)
    if not match:
        return None
    indent, fence, info = match.groups()
    if fence[0] == "`" and "`" in info:
        return None  # inline code like ```ls``` is not a fence (CommonMark)
    words = info.split()
    language = words[0].strip("{}.").lower() if words else ""
    return len(indent), fence, language


def _dedent(line: str, indent: int) -> str:
    """Remove up to ``indent`` leading blanks (the fence's own indentation)."""
    removable = len(line) - len(line.lstrip(" \t"))
    return line[min(indent, removable) :]


def _find_blocks(lines: list[str]) -> list[_Block]:
    blocks: list[_Block] = []
    i = 0
    while i < len(lines):
        opened = _opening(lines[i])
        if opened is None:
            i += 1
            continue
        indent, fence, language = opened
        depth = 0  # nested blocks opened by tagged fences inside this one
        j = i + 1
        while j < len(lines):
            if _closes(lines[j], fence[0], len(fence)):
                if depth == 0:
                    break
                depth -= 1
            else:
                inner = _opening(lines[j])
                if inner is not None and inner[2] and inner[1][0] == fence[0]:
                    depth += 1
            j += 1
        closed = j < len(lines)
        content = _strip_blank_lines([_dedent(line, indent) for line in lines[i + 1 : j]])
        blocks.append(_Block(language, content, i, j, closed))
        i = j + 1
    return blocks


def _strip_blank_lines(lines: list[str]) -> str:
    start, end = 0, len(lines)
    while start < end and not lines[start].strip():
        start += 1
    while end > start and not lines[end - 1].strip():
        end -= 1
    return "\n".join(lines[start:end])


def looks_like_command(line: str) -> bool:
    """Whether a lone line of text reads like a shell command rather than a sentence.

    Heuristic: the first word must look like a program, builtin or path (letters, digits and
    ``_ . / ~ + -`` only, so ``"Sure:"`` or ``'"ls'`` fail); it must not be a capitalised word that
    usually starts an English sentence (``I``, ``Let``, ``The``, ``Now``, ``First``, ``We`` ...);
    any other capitalised word (``Nothing``) starts prose when more words or a full stop follow
    (programs are lower-case; ``Rscript x.R`` is the price); and a line of more than three words
    ending in a word followed by ``.``, ``!`` or ``?`` is prose (``cp -r data .`` still passes:
    its ``.`` stands alone). It errs towards running: a mistaken command just fails in the shell,
    and the agent reads the error.
    """
    words = line.split()
    if not words or not _PROGRAM.match(words[0]) or words[0].rstrip(".!?") in _SENTENCE_STARTERS:
        return False
    ends_like_sentence = re.search(r"[A-Za-z0-9)\]'\"][.!?]$", line) is not None
    if _CAPITALISED.match(words[0]) and (len(words) > 1 or ends_like_sentence):
        return False  # "Nothing to do.", "Training looks fine"
    return not (ends_like_sentence and len(words) > MAX_BARE_WORDS_IF_PUNCTUATED)


def _bare_command(text: str, multiline_commands: Mapping[str, str]) -> ParsedAction:
    """Step 4: no fenced block. ``text`` is the visible reply, stripped."""
    lines = text.split("\n")
    first_word = lines[0].split()[0] if lines[0].split() else ""
    if first_word in multiline_commands:
        terminator = multiline_commands[first_word]
        for end, line in enumerate(lines):
            if end > 0 and line.strip() == terminator:
                thought = "\n".join(lines[end + 1 :]).strip()
                return ParsedAction("\n".join(lines[: end + 1]), thought)
        return ParsedAction(
            None,
            text,
            f"The {first_word} command must end with a line `{terminator}`, and none was found. "
            f"Put the whole command, ending with `{terminator}`, in one ```bash block.",
        )
    if len(lines) == 1:
        line = lines[0]
        if len(line) > 2 and line[0] == line[-1] == "`" and "`" not in line[1:-1]:
            line = line[1:-1].strip()  # `ls -la` written as inline code
        if line and looks_like_command(line):
            return ParsedAction(line, "")
    return ParsedAction(None, text, "No command found. End your reply with one command in a ```bash block.")


def _block_action(block: _Block, thought: str) -> ParsedAction:
    if not block.closed:
        return ParsedAction(
            None,
            thought,
            f"A code block was opened on line {block.first_line + 1} and never closed. "
            "Close it with a ``` line after the command.",
        )
    if block.language in PYTHON_LANGUAGES:
        return ParsedAction(
            None,
            thought,
            f"The ```{block.language} block looks like the contents of a file, not a command. To write a file, "
            "put a heredoc in a ```bash block (cat > script.py << 'EOF' ... EOF); to run code, use a command "
            "such as `python script.py`.",
        )
    if block.language not in SHELL_LANGUAGES:
        return ParsedAction(
            None, thought, f"A ```{block.language} block is not a command. Put the command in a ```bash block."
        )
    command = block.content
    if block.language == "console" and command.startswith("$ "):
        command = command[2:].lstrip(" ")  # drop the shell prompt of a console transcript
    if not command.strip():
        return ParsedAction(None, thought, "The code block is empty. Put the command to run inside it.")
    return ParsedAction(command, thought)


def _parse(text: str, multiline_commands: Mapping[str, str]) -> ParsedAction:
    visible, unclosed_think, _ = _split_think(text.replace("\r\n", "\n").replace("\r", "\n"))
    lines = visible.split("\n")
    blocks = _find_blocks(lines)
    if len(blocks) > 1:
        return ParsedAction(
            None,
            visible.strip(),
            f"Found {len(blocks)} code blocks; a reply must contain exactly one, holding the one command "
            "to run now. Put only that command in a single ```bash block.",
        )
    if len(blocks) == 1:
        block = blocks[0]
        thought = "\n".join(lines[: block.first_line] + lines[block.last_line + 1 :]).strip()
        return _block_action(block, thought)
    stripped = visible.strip()
    if stripped:
        action = _bare_command(stripped, multiline_commands)
        if action.command is not None or not unclosed_think:
            return action
    if unclosed_think:
        return ParsedAction(
            None,
            stripped,
            "Your reply opened <think> and never closed it, so all of it after that tag is thinking and no "
            "command was found. Close your thinking with </think>, then give one command in a ```bash block.",
        )
    return ParsedAction(None, "", "Your reply is empty. Write your reasoning, then one command in a ```bash block.")


def parse_action(text: str, multiline_commands: Mapping[str, str] | None = None) -> ParsedAction:
    """Turn one reply into one command or a format error (see the module docstring).

    Never raises: a non-string reply is a format error, and an unexpected failure of the parser
    itself is logged and reported to the agent as a format error rather than crashing a rollout.
    """
    if not isinstance(text, str):
        return ParsedAction(None, "", f"The reply is not text ({type(text).__name__}).")
    try:
        return _parse(text, multiline_commands or {})
    except Exception:  # a parser bug must not end a rollout; it is logged for us to fix
        logger.exception("parse_action failed on a reply of %d characters", len(text))
        return ParsedAction(None, "", "The reply could not be read. Give one command in a ```bash block.")
