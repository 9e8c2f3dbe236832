"""Scripted agents that stand in for a language model when no weights are at hand.

Each policy reads the whole chat conversation (system prompt, ``# Task: <name>`` user message,
then alternating replies and observations) and writes the next assistant reply: a short reasoning
sentence, sometimes a ``<think>`` block first, then one fenced ``bash`` block holding one command.

Policies keep no state between calls: how far an episode has got is read back from the replies
already in the conversation, so one policy object can serve many concurrent rollouts.

Specs (``make_policy``):
    baseline      run the task's baseline script when its workspace lists one (``baseline.py``, MLGym's RL
                  ``src/train.py``), else score the workspace as given (a game's starting strategy); submit
    improve       beat the baseline: a recipe per built-in task (binary search on ``dial``); any other task
                  is refused with a one-line error (``PolicyCannotPlay``)
    noisy         ``improve`` (``baseline`` where improve has no recipe) with useless commands and
                  malformed replies mixed in at random
    probe         a value at random on a task scored by one number (air/policies/probe.py)
    replay:PATH   the commands of a recorded trajectory, then ``submit``
    script:PATH   the commands of a JSON list of strings, then ``submit``

Pure logic: no I/O except reading the file a ``replay:``/``script:`` spec names.
"""

from __future__ import annotations

import random
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from pydantic import TypeAdapter, ValidationError

from air.env.actions import message_text, parse_action
from air.policies.probe import ProbePolicy
from air.policies.recipes import LANE_MERGE_STRATEGY, heredoc, train_script

SPECS = ("baseline", "improve", "noisy", "probe", "replay:PATH", "script:PATH")

SUBMIT = "submit"
VALIDATE = "validate"
USELESS_COMMANDS = ("ls -la", "pwd", "cat README.md 2>/dev/null", "echo thinking")

# Label column and problem kind of the built-in CSV tasks (air/tasks/builtin).
CSV_TASKS: dict[str, tuple[str, str]] = {
    "loanDefault": ("defaulted", "classification"),
    "buildingEnergy": ("annual_energy_mwh", "regression"),
}
DIAL_TASK = "dial"
DIAL_BASELINE_SETTING = 50  # the dial starts here, so the first validate probes the middle
DIAL_RANGE = (0, 100)
DIAL_MAX_PROBES = 7  # ceil(log2(101)): enough for a binary search over 0..100
RIDGE_TASK = "ridgePenalty"
IMPROVE_TASKS = frozenset({*CSV_TASKS, "laneMerge", RIDGE_TASK, DIAL_TASK})  # the tasks improve has a recipe for
# What MLGym's configs name as baseline_paths: CSV and LM tasks, then the RL tasks (games name their
# evaluate.py: their starting strategy is the baseline, scored as it is).
BASELINE_SCRIPTS = ("baseline.py", "src/train.py")

THINK_PROBABILITY = 0.3
_THOUGHTS = (
    "Let me keep this simple and check each step's output before moving on.",
    "One command at a time; the observation will tell me whether it worked.",
    "I should make sure the submission is valid before spending turns on tuning.",
    "The footer shows how many turns are left, so I should not waste any.",
)

_TASK_HEADER = re.compile(r"^#\s*Task:\s*(\S+)")
_DIAL_SET = re.compile(r"^set\s+(-?\d+)$")
# A file of the prompt's WORKSPACE listing: "baseline.py  (4.4 KB)".
_LISTED_FILE = re.compile(r"^(\S+)  \(")
# The dial's validate output, e.g. "Score: 0.870 (target is higher)" or "Score: 1.000 (exact)".
_DIAL_HINT = re.compile(r"target is (?P<direction>higher|lower)|(?P<exact>\bexact\b)", re.IGNORECASE)


class PolicySpecError(ValueError):
    """A policy spec that cannot be turned into a policy (unknown name, unreadable file)."""


class PolicyCannotPlay(PolicySpecError):
    """A policy asked to play a task it has no recipe for."""


def cannot_play(policy: str, tasks: Sequence[str]) -> PolicyCannotPlay:
    return PolicyCannotPlay(
        f"policy {policy!r} has no recipe for {', '.join(map(repr, tasks))}: it plays "
        f"{', '.join(sorted(IMPROVE_TASKS))}; for other tasks use --policy baseline (or noisy)"
    )


def require_playable(policy: Policy, tasks: Sequence[str]) -> None:
    """Refuse, before any rollout, tasks the policy cannot play (a policy's ``plays``; None: any task)."""
    plays = getattr(policy, "plays", None)
    unknown = [task for task in tasks if plays is not None and task not in plays]
    if unknown:
        raise cannot_play(getattr(policy, "name", "?"), unknown)


@runtime_checkable
class Policy(Protocol):
    """Writes the next assistant reply for a conversation. Must not keep per-episode state.

    Policies here also carry a short ``name`` (served model names and logs use it when present).
    """

    def respond(self, messages: list[dict[str, Any]], rng: random.Random) -> str: ...


# --------------------------------------------------------------------------- reading a conversation


@dataclass(frozen=True)
class Step:
    """One command of a playbook and the sentence a model would write before it."""

    command: str
    why: str


@dataclass(frozen=True)
class Conversation:
    """What a policy needs from the messages so far."""

    task: str | None  # the `# Task:` header of the first user message
    replies: list[str]  # earlier assistant replies, in order
    commands: list[str | None]  # the command of each reply; None where the reply was malformed
    observations: list[str]  # the user message after each reply ("" when none came yet)
    files: tuple[str, ...] = ()  # the workspace files the first user message lists


def extract_command(reply: str) -> str | None:
    """The command the env would run for ``reply`` (its own parser), or None for a malformed reply."""
    return parse_action(reply).command


def read_conversation(messages: Sequence[dict[str, Any]]) -> Conversation:
    task = None
    files: tuple[str, ...] = ()
    first_user = next((m for m in messages if m.get("role") == "user"), None)
    if first_user is not None:
        lines = message_text(first_user).strip().splitlines()
        match = _TASK_HEADER.match(lines[0]) if lines else None
        task = match.group(1) if match else None
        files = tuple(m.group(1) for line in lines if (m := _LISTED_FILE.match(line)))
    replies: list[str] = []
    observations: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "assistant":
            replies.append(message_text(message))
            observations.append("")
        elif role == "user" and replies and not observations[-1]:
            observations[-1] = message_text(message)
    return Conversation(task, replies, [extract_command(r) for r in replies], observations, files)


# --------------------------------------------------------------------------- writing a reply


def fenced(command: str) -> str:
    # A fence longer than any backtick run inside keeps the block in one piece.
    longest = max((len(run) for run in re.findall(r"`+", command)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}bash\n{command}\n{fence}"


def render_reply(step: Step, rng: random.Random) -> str:
    parts = []
    if rng.random() < THINK_PROBABILITY:
        parts.append(f"<think>\n{rng.choice(_THOUGHTS)}\n</think>\n")
    parts.append(f"{step.why}\n\n{fenced(step.command)}")
    return "\n".join(parts)


# --------------------------------------------------------------------------- playbooks


_VALIDATE = Step(VALIDATE, "Let me score the current submission before going further.")
_SUBMIT = Step(SUBMIT, "The score looks as good as I will get in this budget, so I will submit.")


def baseline_playbook(task: str | None, files: Sequence[str] = ()) -> list[Step]:
    """Run the baseline script the workspace lists (``files``), else score the starting workspace."""
    script = "baseline.py" if task in CSV_TASKS else next((s for s in BASELINE_SCRIPTS if s in files), None)
    if script:
        return [Step(f"python {script}", f"First I will reproduce the baseline: {script}."), _VALIDATE, _SUBMIT]
    return [Step(VALIDATE, "No baseline script is listed: the starting workspace is the baseline."), _SUBMIT]


def improve_playbook(task: str | None) -> list[Step]:
    """A fixed recipe that beats the baseline (not used for ``dial``, which needs the observations).
    Raises ``PolicyCannotPlay`` for a task without one."""
    if task in CSV_TASKS:
        label, kind = CSV_TASKS[task]
        return [
            Step("head -3 data/train.csv", "Let me look at the columns of the training data first."),
            Step(
                heredoc("train.py", train_script(label, kind)),
                "The baseline uses only a couple of numeric columns. Gradient-boosted trees on all "
                "features, with the categorical ones one-hot encoded, should do much better.",
            ),
            Step("python train.py", "Now train the model and write the submission."),
            _VALIDATE,
            _SUBMIT,
        ]
    if task == "laneMerge":
        return [
            Step(
                heredoc("strategy.py", LANE_MERGE_STRATEGY),
                "Mirroring the other driver leaves points on the table. Going twice and yielding once "
                "should keep them cooperative while I take the gap more often.",
            ),
            _VALIDATE,
            _SUBMIT,
        ]
    if task == RIDGE_TASK:
        return [Step("echo 10 > submission.csv", "A penalty of 100 flattens the fit; 10 should balance it."), _VALIDATE]
    if task == DIAL_TASK:  # next_dial_step plays it from the observations; its opening is validate
        return baseline_playbook(task)
    raise cannot_play("improve", [str(task)])


def next_playbook_step(playbook: Sequence[Step], commands: Sequence[str | None]) -> Step:
    """The first step not yet done, walking earlier commands in order; ``submit`` when all are done."""
    done = 0
    for command in commands:
        if done < len(playbook) and command == playbook[done].command.strip():
            done += 1
    return playbook[done] if done < len(playbook) else _SUBMIT


def next_dial_step(conversation: Conversation) -> Step:
    """Binary search for the dial's target from the hints of earlier validates."""
    low, high = DIAL_RANGE
    setting = DIAL_BASELINE_SETTING
    probes = 0
    last: str | None = None  # the last dial command: "set", "validate" or "exact"
    for command, observation in zip(conversation.commands, conversation.observations, strict=True):
        if command is None:
            continue
        if match := _DIAL_SET.match(command):
            setting, last = int(match.group(1)), "set"
        elif command == VALIDATE:
            probes += 1
            last = VALIDATE
            hint = _DIAL_HINT.search(observation)
            if hint and hint.group("exact"):
                last = "exact"
            elif hint and hint.group("direction").lower() == "higher":
                low = max(low, setting + 1)
            elif hint:
                high = min(high, setting - 1)
    if last == "exact":
        return Step(SUBMIT, "That is the exact setting, so I will submit it.")
    if probes >= DIAL_MAX_PROBES or low > high:
        return Step(SUBMIT, "I have narrowed the dial down as far as my probes allow; submitting.")
    if last is None:
        return Step(VALIDATE, "The dial starts at the baseline setting; validating tells me which way to go.")
    if last == "set":
        return Step(VALIDATE, "Let me check whether the target is higher or lower than this setting.")
    middle = (low + high) // 2
    return Step(f"set {middle}", f"The target is between {low} and {high}, so I will try the middle.")


def next_improve_step(conversation: Conversation) -> Step:
    if conversation.task == DIAL_TASK:
        return next_dial_step(conversation)
    return next_playbook_step(improve_playbook(conversation.task), conversation.commands)


# --------------------------------------------------------------------------- policies


class BaselinePolicy:
    name = "baseline"
    plays = None  # any task

    def respond(self, messages: list[dict[str, Any]], rng: random.Random) -> str:
        conversation = read_conversation(messages)
        playbook = baseline_playbook(conversation.task, conversation.files)
        return render_reply(next_playbook_step(playbook, conversation.commands), rng)


class ImprovePolicy:
    name = "improve"
    plays = IMPROVE_TASKS

    def respond(self, messages: list[dict[str, Any]], rng: random.Random) -> str:
        return render_reply(next_improve_step(read_conversation(messages)), rng)


@dataclass
class NoisyPolicy:
    """``improve`` with noise, so rollouts of one group differ (turns used, format errors, scores).

    Each turn: the next useful step with probability ``useful``, else noise: a useless command
    (share ``useless_share`` of the noise) or a malformed reply. Once only ``submit`` is left, it
    submits with probability ``submit`` per turn and makes noise otherwise.
    """

    useful: float = 0.6
    useless_share: float = 0.6
    submit: float = 0.5
    name: str = "noisy"
    plays = None  # baseline's playbook where improve has no recipe: it is there to make rollouts differ

    def respond(self, messages: list[dict[str, Any]], rng: random.Random) -> str:
        conversation = read_conversation(messages)
        if conversation.task in IMPROVE_TASKS:
            step = next_improve_step(conversation)
        else:
            playbook = baseline_playbook(conversation.task, conversation.files)
            step = next_playbook_step(playbook, conversation.commands)
        chance = self.submit if step.command == SUBMIT else self.useful
        if rng.random() < chance:
            return render_reply(step, rng)
        if rng.random() < self.useless_share:
            return render_reply(Step(rng.choice(USELESS_COMMANDS), "Let me look around a bit more."), rng)
        return malformed_reply(step, rng)


def malformed_reply(step: Step, rng: random.Random) -> str:
    """A reply the env rejects: no fenced block at all, or two of them."""
    if rng.random() < 0.5:
        return f"I think the next thing to do is: {step.command.splitlines()[0]}. Let me think about it more."
    return f"I will run two commands at once.\n\n{fenced(rng.choice(USELESS_COMMANDS))}\n\n{fenced(step.command)}"


@dataclass
class ScriptPolicy:
    """Replies with the given commands in order, then ``submit`` for ever."""

    commands: list[str]
    name: str = "script"

    def respond(self, messages: list[dict[str, Any]], rng: random.Random) -> str:
        done = sum(1 for m in messages if m.get("role") == "assistant")
        if done < len(self.commands):
            return render_reply(Step(self.commands[done], f"Next step ({done + 1} of {len(self.commands)})."), rng)
        return render_reply(_SUBMIT, rng)


# --------------------------------------------------------------------------- specs


def _script_file(path: Path) -> list[str]:
    try:
        return TypeAdapter(list[str]).validate_json(path.read_bytes())
    except OSError as exc:
        raise PolicySpecError(f"script:{path}: cannot read the file ({exc.strerror})") from exc
    except ValidationError as exc:
        problem = exc.errors()[0]
        where = ".".join(str(p) for p in problem["loc"]) or "top level"
        raise PolicySpecError(f"script:{path} must be a JSON list of strings ({where}: {problem['msg']})") from exc


def _replay_file(path: Path) -> list[str]:
    try:
        from air.env.trajectory_reader import recorded_commands  # imported only when replaying
    except ImportError as exc:
        raise PolicySpecError(f"replay:{path}: reading trajectories needs air.env.trajectory_reader ({exc})") from exc
    if not path.exists():
        raise PolicySpecError(f"replay:{path}: no such file or folder")
    try:
        return list(recorded_commands(path))
    except (OSError, ValueError) as exc:
        raise PolicySpecError(f"replay:{path}: {exc}") from exc


_FACTORIES: dict[str, Callable[[], Policy]] = {
    "baseline": BaselinePolicy,
    "improve": ImprovePolicy,
    "noisy": NoisyPolicy,
    "probe": ProbePolicy,
}


def make_policy(spec: str) -> Policy:
    """Build a policy from one of SPECS."""
    kind, sep, argument = spec.partition(":")
    if not sep and kind in _FACTORIES:
        return _FACTORIES[kind]()
    if sep and argument and kind == "replay":
        return ScriptPolicy(_replay_file(Path(argument)), name="replay")
    if sep and argument and kind == "script":
        return ScriptPolicy(_script_file(Path(argument)), name="script")
    raise PolicySpecError(f"Unknown policy spec {spec!r}; valid specs: {', '.join(SPECS)}")
