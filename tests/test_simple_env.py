"""The dial env through verifiers' real rollout path, with a scripted stand-in for the model."""

from __future__ import annotations

import re
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionMessage
from openai.types.chat.chat_completion import Choice

import simple_env
from air.env.actions import REPLY_FORMAT
from simple_env import dial_target, load_environment

Policy = Callable[[list[str]], str]  # the observations so far -> the next reply


class ScriptedClient:
    """Answers ``chat.completions.create`` like an AsyncOpenAI client, from scripted policies.

    A group's rollouts share one client and start from the same prompt, so each policy takes the
    next new conversation and is recognised afterwards by its first reply (which must be unique).
    """

    def __init__(self, *policies: Policy):
        self._waiting = list(policies)
        self._by_first_reply: dict[str, Policy] = {}
        self.chat = SimpleNamespace(completions=SimpleNamespace(create=self._create))

    async def _create(self, *, model: str, messages: list[dict[str, Any]], **_: Any) -> ChatCompletion:
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        observations = [m["content"] for m in messages[2:] if m["role"] == "user"]
        if replies:
            policy = self._by_first_reply[replies[0]]
        else:
            policy = self._waiting.pop(0)
        text = policy(observations)
        if not replies:
            assert text not in self._by_first_reply, "first replies must tell the policies apart"
            self._by_first_reply[text] = policy
        message = ChatCompletionMessage(role="assistant", content=text)
        choice = Choice(index=0, finish_reason="stop", message=message)
        return ChatCompletion(id="scripted", object="chat.completion", created=0, model=model, choices=[choice])


def script(*replies: str) -> Policy:
    return lambda observations: replies[len(observations)]


def bash(command: str, thought: str = "Next step.") -> str:
    return f"{thought}\n```bash\n{command}\n```"


class BinarySearch:
    """Validates the baseline, then halves the interval on every hint; submits when exact."""

    def __init__(self) -> None:
        self.low, self.high, self.dial = 0, 100, 50

    def __call__(self, observations: list[str]) -> str:
        if not observations:
            return bash("validate", "Score the starting dial first.")
        last = observations[-1]
        if "(exact)" in last:
            return bash("submit")
        if "target is higher" in last:
            self.low = self.dial + 1
        elif "target is lower" in last:
            self.high = self.dial - 1
        elif "Dial set to" in last:
            return bash("validate")
        self.dial = (self.low + self.high) // 2
        return bash(f"set {self.dial}")


def expected_reward(dial: int, target: int, format_errors: int = 0, penalty: float = 0.02) -> float:
    """The reward rules written out independently: relative progress of the final score, clipped."""
    baseline = 1 - abs(50 - target) / 100
    score = 1 - abs(dial - target) / 100
    return max(-1.0, min(1.0, (score - baseline) / baseline)) - penalty * format_errors


def example_where(condition: Callable[[int], bool], seed: int = 0) -> int:
    return next(i for i in range(1000) if condition(dial_target(seed, i)))


async def play(env, example_id: int, *policies: Policy) -> list[dict[str, Any]]:
    row = env.get_dataset()[example_id]
    assert row["example_id"] == example_id
    inputs = [dict(row) for _ in policies]
    return await env.run_group(inputs, ScriptedClient(*policies), "scripted-model", {})


def texts(output: dict[str, Any]) -> str:
    return "\n".join(str(m["content"]) for m in output["completion"])


# --- loading --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "key"),
    [
        ({"num_exmples": 3}, "num_exmples"),
        ({"reward": {"scael": "absolute"}}, "reward.scael"),
        ({"max_turns": "x"}, "max_turns"),
    ],
)
def test_bad_arguments_name_the_key(kwargs: dict[str, Any], key: str):
    with pytest.raises(ValueError, match=re.escape(key)):
        load_environment(**kwargs)


def test_dataset_rows_carry_the_prompt_and_no_secret():
    env = load_environment(num_examples=5, max_turns=7)
    dataset = env.get_dataset()
    assert len(dataset) == 5
    assert sorted(dataset.column_names) == ["example_id", "prompt", "task"]
    for i, row in enumerate(dataset):
        system, user = row["prompt"]
        assert (system["role"], user["role"]) == ("system", "user")
        assert REPLY_FORMAT in system["content"] and "validate" in system["content"]
        assert user["content"].split("\n", 1)[0] == "# Task: dial"
        assert "7 turns" in user["content"]
        assert (row["task"], row["example_id"]) == ("dial", i)


def test_targets_depend_on_seed_and_example():
    targets = {dial_target(0, i) for i in range(20)}
    assert len(targets) > 5 and all(0 <= t <= 100 for t in targets)
    assert [dial_target(1, i) for i in range(20)] != [dial_target(0, i) for i in range(20)]
    assert dial_target(3, 4) == dial_target(3, 4)


# --- rollouts -------------------------------------------------------------------------------


async def test_binary_search_earns_the_progress_of_its_final_score():
    example = example_where(lambda t: abs(t - 50) > 20)
    target = dial_target(0, example)
    env = load_environment(max_turns=10)
    [output] = await play(env, example, BinarySearch())
    transcript = texts(output)
    scores = [float(s) for s in re.findall(r"Evaluation Score: \{'score': ([0-9.]+)\}", transcript)]
    baselines = set(re.findall(r"Baseline Score: \{'score': ([0-9.]+)\}", transcript))
    assert baselines == {str(1 - abs(50 - target) / 100)}
    assert re.search(r"Score: \d\.\d{3} \(target is (higher|lower)\)", transcript)
    final_dial = int(re.findall(r"of dial (\d+)", transcript)[-1])
    assert output["reward"] > 0
    assert output["reward"] == pytest.approx(expected_reward(final_dial, target))
    assert output["metrics"]["final_score"] == pytest.approx(scores[-1])
    assert output["metrics"]["best_score"] == pytest.approx(max(scores))
    assert output["metrics"]["validates"] >= 4
    assert output["error"] is None


async def test_never_validating_still_earns_the_final_score():
    example = example_where(lambda t: 10 <= t <= 40)
    target = dial_target(0, example)
    env = load_environment(max_turns=3)
    [output] = await play(env, example, script(bash(f"set {target + 3}"), bash("ls -la"), bash("echo hi")))
    assert output["reward"] == pytest.approx(expected_reward(target + 3, target))
    assert output["reward"] > 0
    assert output["metrics"]["validates"] == 0
    assert output["metrics"]["format_errors"] == 0  # unknown commands are not format errors
    assert "Unknown command: 'ls -la'" in texts(output)
    assert "Final evaluation of dial" in texts(output)


async def test_max_turns_still_runs_the_last_command():
    example = example_where(lambda t: t != 50)
    target = dial_target(0, example)
    env = load_environment(max_turns=2)
    [output] = await play(env, example, script(bash("look around"), bash(f"set {target}")))
    assert output["stop_condition"] == "max_turns_reached"
    assert output["metrics"]["final_score"] == 1.0
    assert output["metrics"]["turns"] == 2
    assert output["reward"] == pytest.approx(expected_reward(target, target))
    last = output["completion"][-1]["content"]
    assert "Final evaluation" in last and "(exact)" in last
    assert f"Dial set to {target}.\n\n[turn 2 of 2]" in texts(output)


async def test_submit_ends_the_rollout_early():
    example = example_where(lambda t: abs(t - 50) > 5)
    target = dial_target(0, example)
    env = load_environment(max_turns=10)
    [output] = await play(env, example, script(bash(f"set {target}"), bash("submit")))
    assert output["stop_condition"] == "has_final_env_response"
    assert output["metrics"]["turns"] == 2
    assert output["metrics"]["final_score"] == 1.0
    assert output["reward"] == pytest.approx(expected_reward(target, target))
    assert "Submitted: the episode ends." in output["completion"][-1]["content"]
    assert texts(output).count("Evaluation Score") == 1  # submit evaluated; no second, final one


async def test_format_errors_are_penalised_and_counted():
    example = example_where(lambda t: abs(t - 50) > 5)
    target = dial_target(0, example)
    env = load_environment(reward={"format_error_penalty": 0.25})
    policy = script("I should think about this first.", bash(f"set {target}"), bash("submit"))
    [output] = await play(env, example, policy)
    assert output["metrics"]["format_errors"] == 1
    assert output["reward"] == pytest.approx(expected_reward(target, target, format_errors=1, penalty=0.25))
    assert "Format error: No command found" in texts(output)


async def test_consecutive_format_errors_end_the_rollout():
    env = load_environment(max_turns=10, max_consecutive_format_errors=2)
    [output] = await play(env, 0, script("Hmm, let me think.", "Still thinking about it.", "validate"))
    assert output["stop_condition"] == "has_final_env_response"
    assert output["metrics"]["turns"] == 2 and output["metrics"]["format_errors"] == 2
    assert "2 format errors in a row" in texts(output)
    assert output["reward"] == pytest.approx(-2 * 0.02)  # the dial never moved: final score = baseline


async def test_unlimited_format_errors_run_to_max_turns():
    env = load_environment(max_turns=4, max_consecutive_format_errors=0)
    [output] = await play(env, 0, script(*["I am not sure what to do."] * 4))
    assert output["stop_condition"] == "max_turns_reached"
    assert output["metrics"]["format_errors"] == 4  # the last one too, counted at cleanup


async def test_a_group_of_different_scripts_gets_different_rewards():
    example = example_where(lambda t: 15 <= t <= 35)
    target = dial_target(0, example)
    env = load_environment(max_turns=10)
    policies = [
        BinarySearch(),
        script(bash(f"set {target + 2}", "Close guess."), bash("submit")),
        script(bash("set 100", "Go high."), bash("submit")),
        script(*["No idea."] * 3),
    ]
    outputs = await play(env, example, *policies)
    rewards = [output["reward"] for output in outputs]
    assert len(set(rewards)) == 4, rewards
    by_first_reply = {output["completion"][0]["content"]: output for output in outputs}
    assert by_first_reply[bash(f"set {target + 2}", "Close guess.")]["reward"] == pytest.approx(
        expected_reward(target + 2, target)
    )
    assert by_first_reply[bash("set 100", "Go high.")]["reward"] < 0
    for output in outputs:
        assert set(simple_env.METRICS) | {"rollout_reward"} <= set(output["metrics"])
        assert output["metrics"]["rollout_reward"] == pytest.approx(output["reward"])


async def test_an_unexpected_failure_stops_only_that_rollout(monkeypatch: pytest.MonkeyPatch):
    run_command = simple_env._run_command

    def jams_on_validate(game, command):
        if command == "validate":
            raise RuntimeError("dial jammed")
        return run_command(game, command)

    monkeypatch.setattr(simple_env, "_run_command", jams_on_validate)
    example = example_where(lambda t: abs(t - 50) > 5)
    target = dial_target(0, example)
    env = load_environment(max_turns=3)
    outputs = await play(
        env, example, script(bash("validate"), bash("submit")), script(bash(f"set {target}"), bash("submit"))
    )
    [broken] = [output for output in outputs if output["completion"][0]["content"] == bash("validate")]
    [fine] = [output for output in outputs if output is not broken]
    assert broken["error"]["error"] == "InfraError"
    assert "dial jammed" in broken["error"]["error_chain_repr"]
    assert broken["reward"] == 0.0
    assert fine["error"] is None
    assert fine["reward"] == pytest.approx(expected_reward(target, target))


async def test_cleanup_of_a_cancelled_rollout_does_nothing():
    env = load_environment()
    row = dict(env.get_dataset()[0])
    state = await env.setup_state(await env.init_state(row, ScriptedClient(), "scripted-model"))
    state["trajectory"].append({"completion": [{"role": "assistant", "content": bash("set 3")}]})
    await env.finish_dial(state)  # is_completed is False: the rollout was cancelled
    game = state[simple_env.GAME_KEY]
    assert game.dial == 50 and game.result == {} and not game.closed
    assert state["final_env_response"] is None
