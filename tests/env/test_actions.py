"""Model text -> one command: examples of each rule, then properties over arbitrary text."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from air.env.actions import REPLY_FORMAT, format_error_observation, looks_like_command, parse_action, strip_think

EDIT = {"edit": "end_of_edit"}


def command_of(text: str, multiline: dict[str, str] | None = None) -> str | None:
    action = parse_action(text, multiline)
    assert (action.command is None) == (action.error is not None), action
    return action.command


# --- thinking -------------------------------------------------------------------------------


def test_think_blocks_are_stripped_whatever_their_case_and_number():
    text = "<think>\nmaybe\n```bash\nrm -rf /\n```\n</think>Listing.\n<THINK>more\nlines</Think>\n```bash\nls -la\n```"
    action = parse_action(text)
    assert action.command == "ls -la"
    assert action.thought == "Listing."


def test_closing_tag_without_opening_drops_everything_before_it():
    assert strip_think("the template opened the tag in the prompt\n```bash\nrm x\n```\n</think>kept") == "kept"
    assert command_of("I think\n```bash\nrm x\n```\n</think>\n```bash\npwd\n```") == "pwd"


def test_unclosed_think_is_a_format_error():
    action = parse_action("<think>I will run\n```bash\nls\n```")
    assert action.command is None
    assert "<think>" in action.error and "</think>" in action.error


def test_strip_think_keeps_text_around_blocks():
    assert strip_think("a<think>b</think>c<think>d</think>e") == "ace"
    assert strip_think("no tags at all") == "no tags at all"


# --- fenced blocks --------------------------------------------------------------------------


@pytest.mark.parametrize("fence", ["```", "~~~", "````"])
@pytest.mark.parametrize("language", ["", "bash", "sh", "shell", "BASH"])
def test_one_block_is_the_command(fence: str, language: str):
    text = f"Look at the data.\n{fence}{language}\n\n  head -n 3 data/train.csv\n\n{fence}\nThen decide."
    action = parse_action(text)
    assert action.command == "  head -n 3 data/train.csv"  # blank lines go, indentation stays
    assert action.thought == "Look at the data.\nThen decide."


def test_multiline_block_keeps_inner_indentation():
    body = "cat > train.py << 'EOF'\nfor i in range(3):\n    print(i)\nEOF\npython train.py"
    assert command_of(f"```bash\n{body}\n```") == body


def test_indented_fence_removes_its_own_indentation():
    assert command_of("1. Run:\n   ```bash\n   cd data\n     ls\n   ```") == "cd data\n  ls"


def test_console_block_drops_the_prompt():
    assert command_of("```console\n$ ls -la\n```") == "ls -la"


def test_markdown_inside_a_heredoc_does_not_end_the_block():
    body = "cat > README.md << 'EOF'\n# Notes\n```python\nprint(1)\n```\nEOF"
    assert command_of(f"Write the notes.\n```bash\n{body}\n```") == body


def test_a_longer_outer_fence_holds_shorter_fences():
    body = "cat > a.md << 'EOF'\n```\nplain\n```\nEOF"
    assert command_of(f"````bash\n{body}\n````") == body


def test_tilde_and_backtick_fences_do_not_close_each_other():
    body = "echo '```'"
    assert command_of(f"~~~bash\n{body}\n```\n~~~") == body + "\n```"


def test_python_block_is_a_format_error_that_explains_heredocs():
    action = parse_action("Here is the model:\n```python\nimport torch\n```")
    assert action.command is None
    assert "python" in action.error and "heredoc" in action.error


def test_other_language_block_is_a_format_error_naming_it():
    action = parse_action('```json\n{"a": 1}\n```')
    assert action.command is None and "json" in action.error


def test_empty_block_is_a_format_error():
    action = parse_action("Nothing to do.\n```bash\n\n   \n```")
    assert action.command is None and "empty" in action.error


@pytest.mark.parametrize("count", [2, 3])
def test_several_blocks_is_a_format_error_with_the_count(count: int):
    text = "\n".join(f"Step {i}:\n```bash\necho {i}\n```" for i in range(count))
    action = parse_action(text)
    assert action.command is None
    assert f"Found {count} code blocks" in action.error


def test_unclosed_block_is_a_format_error():
    action = parse_action("Run it.\n```bash\npython train.py")
    assert action.command is None and "never closed" in action.error


def test_crlf_line_ends():
    assert command_of("Go.\r\n```bash\r\nls\r\npwd\r\n```\r\n") == "ls\npwd"


# --- bare commands --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    ["ls -la", "validate", "submit", "python train.py --epochs 3", "cp -r data .", "./run.sh", "cat a | head -n 2"],
)
def test_bare_command_lines_are_accepted(line: str):
    assert command_of(f"\n  {line}  \n") == line


def test_inline_code_line_is_unwrapped():
    assert command_of("`ls -la`") == "ls -la"


@pytest.mark.parametrize(
    "prose",
    [
        "I will validate now.",
        "Let me look at the files",
        "The model is trained.",
        "Now we check the score",
        "Done.",
        "Nothing here.",
        "Nothing to do here",
        "check the results of the run.",
        "Sure: ls",
        "I'll validate.\nvalidate",  # a command after prose lines is not a bare command
    ],
)
def test_prose_is_no_command(prose: str):
    action = parse_action(prose)
    assert action.command is None
    assert "No command found" in action.error


def test_looks_like_command_heuristic():
    assert looks_like_command("find . -name x")
    assert not looks_like_command("We should train longer")
    assert not looks_like_command("train the model on more data now.")


def test_bare_multiline_command_runs_to_its_terminator():
    text = "edit 3:4\n    x = 1\n    y = 2\nend_of_edit\nThat fixes it."
    action = parse_action(text, EDIT)
    assert action.command == "edit 3:4\n    x = 1\n    y = 2\nend_of_edit"
    assert action.thought == "That fixes it."


def test_bare_multiline_command_without_terminator_is_a_format_error():
    action = parse_action("edit 3:4\n    x = 1", EDIT)
    assert action.command is None and "end_of_edit" in action.error


def test_multiline_commands_are_only_recognised_when_configured():
    assert command_of("edit 3:4\n    x = 1\nend_of_edit") is None


@pytest.mark.parametrize("text", ["", "   \n\t", "<think>only thinking</think>"])
def test_empty_reply_is_a_format_error(text: str):
    assert command_of(text) is None


# --- messages for the agent -----------------------------------------------------------------


def test_format_error_observation_repeats_the_format():
    error = parse_action("Nothing here.").error
    observation = format_error_observation(error)
    assert observation.startswith("Format error: " + error)
    assert "```bash" in observation


def test_reply_format_example_parses():
    example = REPLY_FORMAT.split("like this:\n\n", 1)[1].split("\n\n", 1)[0]
    assert command_of(example) == "ls -la data/"


# --- properties -----------------------------------------------------------------------------

FENCE_OR_THINK = re.compile(r"```|~~~|<\s*/?\s*think\s*>", re.IGNORECASE)
no_fence = st.text(alphabet=st.characters(exclude_characters="\r"), max_size=200).filter(
    lambda s: not FENCE_OR_THINK.search(s)
)
command_line = no_fence.filter(lambda s: "\n" not in s and s.strip() != "")
commands = st.lists(no_fence.filter(lambda s: "\n" not in s), min_size=0, max_size=4).flatmap(
    lambda middle: st.tuples(command_line, command_line).map(lambda ends: "\n".join([ends[0], *middle, ends[1]]))
)
prose = st.lists(no_fence, max_size=3).map("\n".join)
words = st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=2000))
def test_never_raises_on_arbitrary_text(text: str):
    action = parse_action(text, EDIT)
    assert (action.command is None) != (action.error is None)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["```", "~~~", "```bash", "````", "<think>", "</think>", "\n", "x", " ", "edit"])))
def test_never_raises_on_fence_and_tag_soup(pieces: list[str]):
    action = parse_action("".join(pieces), EDIT)
    assert (action.command is None) != (action.error is None)


@settings(max_examples=300, deadline=None)
@given(commands, prose, prose)
def test_one_bash_block_round_trips_the_command(command: str, before: str, after: str):
    text = f"{before}\n```bash\n{command}\n```\n{after}"
    assert parse_action(text).command == command


@settings(max_examples=200, deadline=None)
@given(commands, commands, prose, prose)
def test_two_blocks_always_error(first: str, second: str, before: str, between: str):
    action = parse_action(f"{before}\n```bash\n{first}\n```\n{between}\n~~~\n{second}\n~~~\n")
    assert action.command is None and "Found 2" in action.error


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(words, st.lists(words, min_size=3, max_size=10), st.sampled_from(".!?")), min_size=1))
def test_prose_sentences_error(sentences: list[tuple[str, list[str], str]]):
    text = " ".join(f"{first.capitalize()} {' '.join(rest)}{end}" for first, rest, end in sentences)
    assert parse_action(text).command is None
