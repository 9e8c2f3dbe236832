"""The words the agent reads: the system message (commands, limits, reply format), the task
message (description, workspace listing, baseline), and the framing of observations. Our own
text; with an MLGym checkout, its commands are documented from their own headers (ToolSet.docs)."""

from __future__ import annotations

from collections import Counter
from pathlib import PurePosixPath

from air.env.actions import REPLY_FORMAT
from air.sandbox.config import WORKSPACE
from air.tasks.loader import Task
from air.tasks.mlgym_tools import ToolSet
from air.tasks.workspace import Evaluation

BUILTIN_COMMANDS = """\
- Any bash command. The shell is persistent: cd, variables and functions carry over between turns.
  There is no interactive terminal: editors such as vim or nano and prompts waiting for input do not
  work. Write files with heredocs, e.g.
      cat > train.py << 'EOF'
      ...
      EOF
- validate: evaluate your current submission and show its score next to the baseline's. The episode
  goes on, so validate as often as you like.
- submit: evaluate your current submission and end the episode. Submit when you are done."""


BRIEF_FORMAT = """\
Reply with a sentence of reasoning, then exactly one command in one fenced code block, like this:

I will look at the files first.
```bash
ls -la
```"""


def system_prompt(
    *,
    tools: ToolSet | None,
    max_turns: int,
    command_timeout: float,
    long_command_timeout: float | None,
    observation_max_chars: int,
    brief: bool = False,
) -> str:
    replies = f"{max_turns} {'reply' if max_turns == 1 else 'replies'}"
    if brief:  # a small model's prompt: what a reply must look like and how the score is taken, nothing else
        return f"""\
You work on one machine-learning task in a Linux container, in {WORKSPACE}. Each reply runs one shell
command there. The command validate scores your submission. You have {replies}; then your workspace
is scored as it is.

{BRIEF_FORMAT}"""
    commands = BUILTIN_COMMANDS if tools is None else _mlgym_commands(tools)
    long_limit = f"{long_command_timeout:g} s" if long_command_timeout else "the task's training time limit"
    return f"""\
You are an autonomous machine-learning researcher. You work on one task inside a Linux container,
in the workspace {WORKSPACE}, by running one shell command per reply and reading its output.

COMMANDS
{commands}

LIMITS
- You have {replies}. When they run out, your workspace is evaluated as it is.
- A command may run for {command_timeout:g} s ({long_limit} when it runs python, torchrun, accelerate or
  deepspeed); then it is interrupted. Long output is cut to {observation_max_chars} characters (its start
  and end are kept), so print summaries rather than whole files.
- There is no internet access.

REPLY FORMAT
{REPLY_FORMAT}"""


def _mlgym_commands(tools: ToolSet) -> str:
    return (
        "Plain bash commands work, and also these special commands (each documented by its own files):\n\n"
        f"{tools.docs().strip()}\n\n"
        "The shell is persistent and has no interactive terminal: use the commands above instead of editors."
    )


def task_prompt(task: Task, *, listing: str) -> str:
    metric = task.primary_metric
    direction = "higher" if task.higher_is_better else "lower"
    baseline = (
        f"The baseline scores {metric} = {task.baseline_score:g} ({direction} is better). Beat it."
        if metric and task.baseline_score is not None
        else "No baseline score is recorded for this task."
    )
    return f"""\
# Task: {task.name}
{task.config.name}

{task.description.strip()}

WORKSPACE ({WORKSPACE}, your current directory)
{listing}

{baseline}"""


def workspace_listing(task: Task, max_entries: int = 40) -> str:
    """The files the agent starts with (secrets excluded), folders summarised when there are many."""
    secret = set(task.secret_files)
    files = {rel: path for rel, path in task.workspace_files().items() if rel not in secret}
    if not files:
        return "(empty)"
    if len(files) <= max_entries:
        return "\n".join(f"{rel}  ({_size(path.stat().st_size)})" for rel, path in sorted(files.items()))
    # Too many to list: top-level files, then one line per folder with its file count.
    folders = Counter(PurePosixPath(rel).parts[0] for rel in files if "/" in rel)
    lines = [f"{rel}  ({_size(files[rel].stat().st_size)})" for rel in sorted(files) if "/" not in rel]
    lines += [f"{name}/  ({count} files)" for name, count in sorted(folders.items())]
    return "\n".join(lines)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n:.1f} GB"


def evaluation_text(task: Task, evaluation: Evaluation, *, submitted: bool) -> str:
    """What the agent reads after validate or submit (MLGym's two score lines, then our summary)."""
    if not evaluation.ok:
        what = "Submission" if submitted else "Validation"
        return f"{what} failed ({evaluation.status.replace('_', ' ')}): {evaluation.error or 'no details'}"
    lines = []
    if evaluation.submission:
        lines.append(f"Submission artefact: {evaluation.submission}")
    lines.append(f"Baseline Score: {task.baseline}")
    lines.append(f"Evaluation Score: {evaluation.metrics}")
    if submitted:
        lines.append("Your submission was evaluated; the episode is over.")
    return "\n".join(lines)


def cap_output(text: str, max_chars: int) -> str:
    """Keep the start and the end of a long output, saying how much was cut."""
    if len(text) <= max_chars:
        return text
    head = max_chars * 2 // 3
    tail = max_chars - head
    cut = len(text) - head - tail
    return f"{text[:head]}\n[... {cut} characters cut ...]\n{text[-tail:]}"


def footer(turn: int, max_turns: int, exit_code: int | None, cwd: str, *, timed_out: bool = False) -> str:
    parts = [f"turn {turn} of {max_turns}"]
    if timed_out:
        parts.append("timed out")
    elif exit_code is not None:
        parts.append(f"exit {exit_code}")
    parts.append(f"cwd {cwd}")
    return "[" + " | ".join(parts) + "]"
