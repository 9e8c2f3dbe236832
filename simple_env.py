"""``dial``: a tiny multi-turn game with the MLGym env's contract and no Docker.

It exercises the same plumbing as the real env (prime-rl / verifiers rollouts, one command per
reply parsed by ``air.env.actions``, rewards from ``air.env.rewards``, a final evaluation, metrics) in
milliseconds, for checking a training set-up and for tests.

The game: a dial from 0 to 100 starts at 50 (the baseline). Each example hides an integer target
in [0, 100], derived from ``seed`` and the example's id inside the env (never in the dataset).
Commands: ``set N`` turns the dial, ``validate`` scores it (1 - |dial - target| / 100) and says
whether the target is higher or lower, ``submit`` scores it and ends the episode. Anything else
is an unknown command (an observation, not a format error); a reply without exactly one command
is a format error.

Rewards follow ``air.env.rewards``: each evaluation is a step reward; when the rollout ends with a dial
that was never evaluated, it is evaluated once more ("final"), so an agent that never validates
still earns its score. When ``max_turns`` ends the rollout, verifiers never calls ``env_response``
on the last reply; a cleanup hook runs that last command, and its observation lands in
``state["final_env_response"]`` so it shows in the completion.

Errors: agent mistakes are observations. Anything unexpected inside ``env_response`` is logged and
raised as ``vf.InfraError`` (verifiers then stops only that rollout and records the error);
``vf.Error`` subclasses pass through unchanged.
"""

from __future__ import annotations

import logging
import random
import re
from dataclasses import dataclass, field
from typing import Any

import verifiers as vf
from pydantic import ValidationError

from air.env.actions import REPLY_FORMAT, format_error_observation, message_text, parse_action
from air.env.rewards import RewardTracker
from air.env.simple_env_settings import SimpleEnvSettings

logger = logging.getLogger(__name__)

TASK = "dial"
DIAL_MIN, DIAL_MAX = 0, 100
BASELINE_DIAL = 50
GAME_KEY = "dial_game"  # where a rollout's DialGame lives in the verifiers state
_INTEGER = re.compile(r"^[+-]?[0-9]{1,6}$")  # ASCII digits only: int() of other digits or huge strings fails

COMMANDS = f"""\
Commands (one per reply):
  set N      turn the dial to N, an integer from {DIAL_MIN} to {DIAL_MAX}
  validate   score the current dial and learn whether the target is higher or lower
  submit     score the current dial and end the episode"""

SYSTEM_PROMPT = f"You are an agent that plays a game by sending commands.\n\n{COMMANDS}\n\n{REPLY_FORMAT}"


def user_prompt(max_turns: int) -> str:
    return f"""\
# Task: {TASK}
A dial goes from {DIAL_MIN} to {DIAL_MAX} and starts at {BASELINE_DIAL}. A hidden target, an integer \
from {DIAL_MIN} to {DIAL_MAX}, gives the dial the score 1 - |dial - target| / 100. The starting dial's \
score is the baseline. Your reward is how much your last score improves on the baseline, so find \
the target and leave the dial on it. You have {max_turns} turns; the dial is scored once more when \
the episode ends.

{COMMANDS}"""


def dial_target(seed: int, example_id: int) -> int:
    """The hidden target of one example (a string seed is hashed with SHA-512: stable across runs)."""
    return random.Random(f"{TASK}:{seed}:{example_id}").randint(DIAL_MIN, DIAL_MAX)


def dial_score(dial: int, target: int) -> float:
    # Integer arithmetic first, so the score prints as 0.87 and not 0.8699999999999999.
    return (100 - abs(dial - target)) / 100


@dataclass
class DialGame:
    """One rollout's game."""

    target: int
    tracker: RewardTracker
    dial: int = BASELINE_DIAL
    evaluated_dial: int | None = None  # the dial at the last evaluation
    validates: int = 0
    format_errors: int = 0
    consecutive_format_errors: int = 0
    handled_turns: int = 0  # replies whose command has run
    finished: bool = False  # submit or too many format errors
    closed: bool = False  # the cleanup has run
    result: dict[str, float] = field(default_factory=dict)  # reward and metrics, set by the cleanup


def _evaluate(game: DialGame, label: str) -> str:
    score = dial_score(game.dial, game.target)
    game.tracker.record(score)
    game.evaluated_dial = game.dial
    if game.target > game.dial:
        hint = "target is higher"
    elif game.target < game.dial:
        hint = "target is lower"
    else:
        hint = "exact"
    baseline = game.tracker.baseline
    return (
        f"{label} of dial {game.dial}:\n"
        f"Baseline Score: {{'score': {baseline}}}\n"
        f"Evaluation Score: {{'score': {score}}}\n"
        f"Score: {score:.3f} ({hint})"
    )


def _run_command(game: DialGame, command: str) -> str:
    words = command.split()
    name = words[0] if words else ""
    if name == "set":
        value = words[1] if len(words) == 2 else ""
        if _INTEGER.match(value) and DIAL_MIN <= int(value) <= DIAL_MAX:
            game.dial = int(value)
            return f"Dial set to {game.dial}."
        return (
            f"Usage: set N, with N an integer from {DIAL_MIN} to {DIAL_MAX} (got {command!r}). "
            f"The dial stays at {game.dial}."
        )
    if command.strip() == "validate":
        game.validates += 1
        return _evaluate(game, "Validation")
    if command.strip() == "submit":
        game.finished = True
        return _evaluate(game, "Submission") + "\nSubmitted: the episode ends."
    return f"Unknown command: {command!r}. The commands are set N, validate and submit."


def _play(game: DialGame, reply: str, max_consecutive_format_errors: int) -> str:
    """Run one reply; returns the observation (without the turn footer)."""
    action = parse_action(reply)
    if action.command is None:
        game.format_errors += 1
        game.consecutive_format_errors += 1
        observation = format_error_observation(action.error or "no command found")
        if 0 < max_consecutive_format_errors <= game.consecutive_format_errors:
            game.finished = True
            observation += f"\n{game.consecutive_format_errors} format errors in a row: the episode ends."
        return observation
    game.consecutive_format_errors = 0
    return _run_command(game, action.command)


def _reply_text(completion: Any) -> str:
    """The text of the last assistant message of a turn (content may be a list of parts)."""
    messages = completion if isinstance(completion, list) else []
    for message in reversed(messages):
        if isinstance(message, dict) and message.get("role") == "assistant":
            return message_text(message)
    return completion if isinstance(completion, str) else ""


class SimpleDialEnv(vf.MultiTurnEnv):
    """The dial game as a verifiers multi-turn environment."""

    def __init__(self, settings: SimpleEnvSettings, **kwargs: Any):
        self.settings = settings
        super().__init__(
            dataset=_build_dataset(settings),
            rubric=DialRubric(),
            max_turns=settings.max_turns,
            message_type="chat",
            **kwargs,
        )

    async def setup_state(self, state: vf.State) -> vf.State:
        target = dial_target(self.settings.seed, int(state["example_id"]))
        baseline = dial_score(BASELINE_DIAL, target)
        tracker = RewardTracker(baseline=baseline, higher_is_better=True, settings=self.settings.reward)
        state[GAME_KEY] = DialGame(target=target, tracker=tracker)
        return state

    def _footer(self, state: vf.State) -> str:
        return f"\n\n[turn {len(state['trajectory'])} of {self.settings.max_turns}]"

    def _play_last_reply(self, state: vf.State) -> str:
        game: DialGame = state[GAME_KEY]
        reply = _reply_text(state["trajectory"][-1]["completion"])
        observation = _play(game, reply, self.settings.max_consecutive_format_errors)
        game.handled_turns = len(state["trajectory"])
        return observation + self._footer(state)

    async def env_response(self, messages: vf.Messages, state: vf.State, **kwargs: Any) -> vf.Messages:
        try:
            response = [{"role": "user", "content": self._play_last_reply(state)}]
            if state[GAME_KEY].finished:
                state["final_env_response"] = response
            return response
        except vf.Error:
            raise
        except Exception as exc:  # a bug here must stop only this rollout, with the cause recorded
            logger.exception("dial env_response failed")
            raise vf.InfraError(f"dial env_response failed: {type(exc).__name__}: {exc}") from exc

    @vf.cleanup
    async def finish_dial(self, state: vf.State) -> None:
        """Run the unanswered last reply, evaluate an unevaluated dial, compute reward and metrics."""
        game: DialGame | None = state.get(GAME_KEY)
        if game is None or game.closed or not state.get("is_completed"):
            return  # cancelled (or never set up): nothing to finish
        game.closed = True
        turns = len(state["trajectory"])
        if state.get("error") is None:
            extra: list[str] = []
            if game.handled_turns < turns and not game.finished:
                extra.append(self._play_last_reply(state))  # max_turns: env_response never saw it
            if game.evaluated_dial is None or game.evaluated_dial != game.dial:
                extra.append(_evaluate(game, "Final evaluation"))
            if extra:
                final = list(state.get("final_env_response") or [])
                final.append({"role": "user", "content": "\n\n".join(extra)})
                state["final_env_response"] = final
            reward = game.tracker.rollout_reward(game.format_errors)
        else:
            reward = 0.0  # the rollout failed; prime-rl masks it anyway
        game.result = {
            "rollout_reward": reward,
            **game.tracker.metrics(),
            "validates": float(game.validates),
            "format_errors": float(game.format_errors),
            "turns": float(turns),
        }


def _result_of(state: vf.State) -> dict[str, float]:
    game = state.get(GAME_KEY)
    return game.result if isinstance(game, DialGame) else {}


def _metric(name: str):
    async def metric(state: vf.State) -> float:
        return float(_result_of(state).get(name, 0.0))

    metric.__name__ = name
    return metric


METRICS = ("baseline_score", "best_score", "final_score", "improvement", "validates", "format_errors", "turns")


class DialRubric(vf.Rubric):
    """Reward = the rollout reward computed at cleanup; the rest are weight-0 metrics."""

    def __init__(self) -> None:
        super().__init__(funcs=[_metric("rollout_reward")], weights=[1.0])
        for name in METRICS:
            self.add_metric(_metric(name))


def _build_dataset(settings: SimpleEnvSettings):
    from datasets import Dataset  # heavy: imported when an env is built, not with the module

    prompt = [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": user_prompt(settings.max_turns)},
    ]
    rows = [{"prompt": prompt, "task": TASK, "example_id": i} for i in range(settings.num_examples)]
    return Dataset.from_list(rows)


def load_environment(**kwargs: Any) -> SimpleDialEnv:
    """Build the dial env; unknown or mistyped keys fail with the key named."""
    try:
        settings = SimpleEnvSettings.model_validate(kwargs)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(part) for part in error['loc'])}: {error['msg']}" for error in exc.errors()
        )
        raise ValueError(f"simple_env load_environment: invalid arguments: {problems}") from None
    return SimpleDialEnv(settings)
