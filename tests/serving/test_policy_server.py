"""Scripted policies served over real HTTP, reached through the real ``openai`` clients (no Docker).

Conversations are built by hand the way the env builds them: a system prompt, a first user
message starting with ``# Task: <name>``, then replies and observations ending in a footer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import openai
import pytest

from air.cli.runs import register_policy_server
from air.policies.scripted import (
    IMPROVE_TASKS,
    SPECS,
    ImprovePolicy,
    NoisyPolicy,
    PolicyCannotPlay,
    PolicySpecError,
    ScriptPolicy,
    baseline_playbook,
    extract_command,
    improve_playbook,
    make_policy,
    require_playable,
)
from air.serving.server import PolicyServer, PolicyServerError
from air.tasks.loader import BUILTIN_TASK_ROOT, load_task
from rigs.patience import backstop

SYSTEM = "You are an ML research agent. Reply with reasoning, then one command in one fenced bash block."
WORKSPACE = "/home/agent/workspace"


# ----------------------------------------------------------------------------- helpers


def opening(task: str) -> list[dict]:
    first = f"# Task: {task}\nA made-up description of the task.\n\nWORKSPACE\ndata/train.csv  (10 KB)"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": first}]


def observation(output: str, turn: int, exit_code: int = 0) -> str:
    return f"{output}\n[turn {turn} of 40 | exit {exit_code} | cwd {WORKSPACE}]"


def conversation(task: str, commands: list[str], outputs: list[str] | None = None) -> list[dict]:
    """A conversation in which the agent already ran ``commands`` (replies written as a model would)."""
    messages = opening(task)
    for turn, command in enumerate(commands, start=1):
        messages.append({"role": "assistant", "content": f"Running the next step.\n```bash\n{command}\n```"})
        output = outputs[turn - 1] if outputs else "ok"
        messages.append({"role": "user", "content": observation(output, turn)})
    return messages


Ask = Callable[[list[dict]], str]


def run_episode(ask: Ask, task: str, execute: Callable[[str], str], max_turns: int = 40) -> list[str | None]:
    """Drive a policy like the env does; returns each reply's command (None for a malformed one)."""
    messages = opening(task)
    commands: list[str | None] = []
    for turn in range(1, max_turns + 1):
        reply = ask(messages)
        command = extract_command(reply)
        commands.append(command)
        if command == "submit":
            break
        output = "Format error: exactly one fenced block is needed." if command is None else execute(command)
        messages += [{"role": "assistant", "content": reply}, {"role": "user", "content": observation(output, turn)}]
    return commands


def client_ask(client: openai.OpenAI, **kwargs) -> Ask:
    def ask(messages: list[dict]) -> str:
        response = client.chat.completions.create(model="scripted", messages=messages, **kwargs)
        return response.choices[0].message.content

    return ask


class FakeDial:
    """The dial game as the policy sees it: `set N`, `validate` gives a hint, `submit` ends."""

    def __init__(self, target: int) -> None:
        self.target, self.setting, self.validates = target, 50, 0

    def __call__(self, command: str) -> str:
        if match := re.fullmatch(r"set (\d+)", command):
            self.setting = int(match.group(1))
            return f"Dial set to {self.setting}."
        if command == "validate":
            self.validates += 1
            score = 1 - abs(self.setting - self.target) / 100
            hint = (
                "exact"
                if self.setting == self.target
                else ("target is higher" if self.target > self.setting else "target is lower")
            )
            return f"Score: {score:.3f} ({hint})"
        return f"unknown command: {command}"


@pytest.fixture(scope="module")
def improve_server():
    with PolicyServer("improve", seed=0) as server:
        yield server


@pytest.fixture
def client(improve_server) -> openai.OpenAI:
    with openai.OpenAI(base_url=improve_server.base_url, api_key="unused", max_retries=0) as c:
        yield c


# ----------------------------------------------------------------------------- the HTTP surface


def test_models_list_and_health(improve_server, client):
    assert [m.id for m in client.models.list()] == ["scripted-improve"] == [improve_server.model_name]
    health = httpx.get(improve_server.base_url.removesuffix("/v1") + "/health").json()
    assert health == {"status": "ok", "model": "scripted-improve", "policy": "improve"}


def test_non_streaming_reply_has_the_openai_shape(client):
    response = client.chat.completions.create(
        model="any-name",
        messages=opening("loanDefault"),
        temperature=0.7,
        max_tokens=512,
        top_p=0.9,
        logprobs=True,
        extra_body={"return_token_ids": True, "skip_special_tokens": False},
    )
    assert response.object == "chat.completion" and response.id.startswith("chatcmpl-")
    assert response.model == "any-name"
    (choice,) = response.choices
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    assert extract_command(choice.message.content) == "head -3 data/train.csv"
    assert response.usage.prompt_tokens > 0 and response.usage.completion_tokens > 0
    assert response.usage.total_tokens == response.usage.prompt_tokens + response.usage.completion_tokens


def test_streaming_reply_matches_the_plain_one(client):
    messages = conversation("laneMerge", [improve_playbook("laneMerge")[0].command])
    plain = client.chat.completions.create(model="m", messages=messages, seed=11).choices[0].message.content
    stream = client.chat.completions.create(
        model="m", messages=messages, seed=11, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == plain
    assert extract_command(text) == "validate"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


async def test_async_client_streaming_and_plain(improve_server):
    async with openai.AsyncOpenAI(base_url=improve_server.base_url, api_key="unused", max_retries=0) as client:
        response = await client.chat.completions.create(model="m", messages=opening("dial"))
        assert extract_command(response.choices[0].message.content) == "validate"
        stream = await client.chat.completions.create(model="m", messages=opening("dial"), stream=True)
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
        assert extract_command(text) == "validate"


def test_raw_sse_stream_ends_with_done(improve_server):
    body = {"model": "m", "messages": opening("laneMerge"), "stream": True}
    with httpx.stream("POST", f"{improve_server.base_url}/chat/completions", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert all(line.startswith("data: ") for line in events)
    assert events[-1] == "data: [DONE]"
    first = json.loads(events[0].removeprefix("data: "))
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"]["role"] == "assistant"


async def test_verifiers_reads_the_response(improve_server):
    """What verifiers does with a reply: one choice, content, not truncated, no token data."""
    from verifiers.utils.response_utils import parse_is_truncated, parse_response_messages, parse_response_tokens

    async with openai.AsyncOpenAI(base_url=improve_server.base_url, api_key="unused", max_retries=0) as client:
        sampling_args = {"temperature": 1.0, "max_completion_tokens": 256, "logprobs": True, "extra_body": {}}
        response = await client.chat.completions.create(model="m", messages=opening("dial"), **sampling_args)
    (message,) = await parse_response_messages(response, "chat")
    assert message["role"] == "assistant" and extract_command(message["content"]) == "validate"
    assert await parse_is_truncated(response, "chat") is False
    assert await parse_response_tokens(response, "chat") is None


@pytest.mark.parametrize(
    ("body", "fragment"),
    [
        ({"model": "m"}, "messages"),
        ({"model": "m", "messages": "hello"}, "messages"),
        ({"model": "m", "messages": []}, "messages"),
        ({"model": "m", "messages": [{"role": "wizard", "content": "hi"}]}, "messages.0.role"),
        ({"model": "m", "messages": [{"role": "user", "content": 42}]}, "messages.0.content"),
        ({"model": "m", "messages": [{"content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "model"),
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}], "n": 0}, "n"),
        ([1, 2, 3], "body"),
    ],
)
def test_bad_requests_get_400_with_an_openai_error(improve_server, client, body, fragment):
    response = httpx.post(f"{improve_server.base_url}/chat/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error" and fragment in error["message"]
    # The server is still answering.
    assert extract_command(
        client.chat.completions.create(model="m", messages=opening("dial")).choices[0].message.content
    )


def test_invalid_json_and_unknown_routes_get_json_errors(improve_server, client):
    response = httpx.post(
        f"{improve_server.base_url}/chat/completions",
        content=b"{not json",
        headers={"content-type": "application/json"},
    )
    assert response.status_code == 400 and "Invalid JSON" in response.json()["error"]["message"]
    missing = httpx.get(f"{improve_server.base_url}/nope")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "not_found_error"
    with pytest.raises(openai.BadRequestError):
        client.chat.completions.create(model="m", messages=[{"role": "wizard", "content": "x"}])


def test_several_choices_when_asked(client):
    response = client.chat.completions.create(model="m", messages=opening("dial"), n=3, seed=1)
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert {extract_command(c.message.content) for c in response.choices} == {"validate"}


def test_content_parts_are_read_as_text(client):
    messages = opening("loanDefault")
    messages[1] = {"role": "user", "content": [{"type": "text", "text": messages[1]["content"]}]}
    reply = client.chat.completions.create(model="m", messages=messages).choices[0].message.content
    assert extract_command(reply) == "head -3 data/train.csv"


async def test_32_concurrent_requests_are_all_answered(improve_server):
    playbook = [step.command for step in improve_playbook("loanDefault")]
    async with openai.AsyncOpenAI(base_url=improve_server.base_url, api_key="unused", max_retries=0) as client:

        async def ask(done: int) -> str:
            messages = conversation("loanDefault", playbook[:done])
            response = await client.chat.completions.create(model="m", messages=messages)
            return extract_command(response.choices[0].message.content)

        depths = [i % len(playbook) for i in range(32)]
        answers = await asyncio.gather(*(ask(d) for d in depths))
    assert answers == [playbook[d] for d in depths]


def test_request_seed_makes_replies_repeatable():
    messages = conversation("loanDefault", ["head -3 data/train.csv"])
    with PolicyServer("noisy", seed=0) as server, openai.OpenAI(base_url=server.base_url, api_key="x") as client:
        replies = [
            client.chat.completions.create(model="m", messages=messages, seed=5).choices[0].message.content
            for _ in range(3)
        ]
        others = {
            client.chat.completions.create(model="m", messages=messages, seed=s).choices[0].message.content
            for s in range(30)
        }
    assert replies[0] == replies[1] == replies[2]
    assert len(others) > 1


def test_start_stop_and_port_errors():
    server = PolicyServer("baseline").start()
    url = server.base_url
    assert re.fullmatch(r"http://127\.0\.0\.1:\d+/v1", url) and server.port > 0 and server.running
    with pytest.raises(PolicyServerError, match=f"cannot listen on 127.0.0.1:{server.port}"):
        PolicyServer("baseline", port=server.port).start()
    server.stop()
    assert not server.running
    with pytest.raises(httpx.ConnectError):
        httpx.get(url + "/models")


def _get_health(conn: socket.socket) -> bytes:
    """One keep-alive GET /health on ``conn``; the response's bytes (empty when the server closed it)."""
    conn.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: keep-alive\r\n\r\n")
    data = b""
    while b"\r\n\r\n" not in data or not data.endswith(b"}"):
        chunk = conn.recv(4096)
        if not chunk:
            break
        data += chunk
    return data


def test_an_idle_connection_outlives_the_clients_pool_expiry(improve_server):
    # openai/httpx keep idle connections 5 s; a server closing at the same 5 s races the client's reuse.
    with socket.create_connection(("127.0.0.1", improve_server.port), timeout=10) as conn:
        assert _get_health(conn).startswith(b"HTTP/1.1 200")
        time.sleep(openai._constants.DEFAULT_CONNECTION_LIMITS.keepalive_expiry + 1)
        assert _get_health(conn).startswith(b"HTTP/1.1 200"), "an idle pooled connection was closed"


def test_policy_failure_answers_500_and_the_server_survives():
    class Broken:
        name = "broken"

        def respond(self, messages, rng):
            raise RuntimeError("boom")

    with PolicyServer(Broken()) as server, openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as c:
        assert server.model_name == "scripted-broken"
        with pytest.raises(openai.InternalServerError, match="boom"):
            c.chat.completions.create(model="m", messages=opening("dial"))
        assert [m.id for m in c.models.list()] == ["scripted-broken"]


# ----------------------------------------------------------------------------- policies, one reply


FIRST_COMMAND = {
    ("baseline", "loanDefault"): "python baseline.py",
    ("baseline", "buildingEnergy"): "python baseline.py",
    ("baseline", "laneMerge"): "validate",
    ("baseline", "dial"): "validate",
    ("baseline", "titanic"): "validate",  # no baseline script listed: the workspace as given
    ("improve", "loanDefault"): "head -3 data/train.csv",
    ("improve", "buildingEnergy"): "head -3 data/train.csv",
    ("improve", "dial"): "validate",
}


@pytest.mark.parametrize(("spec", "task"), list(FIRST_COMMAND))
def test_first_reply_has_one_block_with_the_expected_command(spec, task):
    with PolicyServer(spec) as server, openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as c:
        for _ in range(5):  # the <think> block comes and goes; the command must not
            reply = c.chat.completions.create(model="m", messages=opening(task)).choices[0].message.content
            assert len(re.findall(r"^```bash$", reply, re.MULTILINE)) == 1, reply
            assert extract_command(reply) == FIRST_COMMAND[spec, task]
            assert reply.split("```bash")[0].strip(), "a short reasoning comes before the block"


def test_improve_writes_the_better_lane_merge_strategy(client):
    reply = client.chat.completions.create(model="m", messages=opening("laneMerge")).choices[0].message.content
    command = extract_command(reply)
    assert command.startswith("cat > strategy.py << 'EOF'\n") and command.endswith("\nEOF")
    assert "return 0 if len(history) % 3 == 2 else 1" in command


def test_replies_parse_the_same_with_the_envs_parser():
    actions = pytest.importorskip("air.env.actions")
    rng = random.Random(0)
    for policy in (make_policy("baseline"), make_policy("improve"), NoisyPolicy()):
        for task in ("loanDefault", "buildingEnergy", "laneMerge", "dial", "titanic"):
            plays = getattr(policy, "plays", None)
            if plays is not None and task not in plays:
                continue
            for done in range(4):
                playbook = improve_playbook(task) if task in IMPROVE_TASKS else baseline_playbook(task)
                commands = [s.command for s in playbook][:done]
                reply = policy.respond(conversation(task, commands), rng)
                parsed = actions.parse_action(reply)
                assert parsed.command == extract_command(reply), reply
                assert (parsed.error is None) == (parsed.command is not None)


def mlgym_style_opening(tmp_path: Path) -> list[dict]:
    """The env's own first prompt for a task in MLGym's layout that ships baseline.py (like
    regressionKaggleHousePrice): the policy must find the script in the prompt's workspace listing."""
    from air.env.prompts import task_prompt, workspace_listing
    from tests.mlgym_like import write_mlgym_like_root

    task = load_task("shipwreck", write_mlgym_like_root(tmp_path / "root"))
    return [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": task_prompt(task, listing=workspace_listing(task))},
    ]


def test_baseline_runs_the_baseline_script_the_workspace_ships(tmp_path):
    messages = mlgym_style_opening(tmp_path)
    with PolicyServer("baseline") as server, openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as c:
        ask = client_ask(c)
        commands = run_episode(ask, "shipwreck", lambda _: "ok")  # opening() lists no baseline script
        assert commands == ["validate", "submit"]
        assert extract_command(ask(messages)) == "python baseline.py"
    rl_like = opening("rlSomething")
    rl_like[1]["content"] += "\nsrc/train.py  (3.0 KB)\nevaluate.py  (1.2 KB)"
    assert extract_command(make_policy("baseline").respond(rl_like, random.Random(0))) == "python src/train.py"


def test_improve_refuses_a_task_it_has_no_recipe_for():
    with pytest.raises(PolicyCannotPlay) as refused:
        require_playable(make_policy("improve"), ["laneMerge", "battleOfSexes"])
    message = str(refused.value)
    assert "\n" not in message and "'battleOfSexes'" in message and "'laneMerge'" not in message.split(":")[0]
    assert "loanDefault" in message and "--policy baseline" in message
    require_playable(make_policy("improve"), sorted(IMPROVE_TASKS))
    require_playable(make_policy("baseline"), ["battleOfSexes"])  # plays any task
    require_playable(make_policy("noisy"), ["battleOfSexes"])  # baseline's playbook, with noise
    # Served (vf-eval, a rehearsal): the request fails with the same line instead of an aimless episode.
    with PolicyServer("improve") as server, openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as c:
        with pytest.raises(openai.InternalServerError, match="has no recipe for 'battleOfSexes'"):
            c.chat.completions.create(model="m", messages=opening("battleOfSexes"))


def test_standalone_refuses_improve_on_a_task_it_cannot_play(tmp_path, monkeypatch, capsys):
    from air.cli.main import main

    monkeypatch.chdir(tmp_path)
    argv = ["standalone", "--policy", "improve", "--task", "battleOfSexes", "--task-root", str(tmp_path)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert err.startswith("air: error: policy 'improve' has no recipe for 'battleOfSexes'") and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "outputs").exists()


def test_noisy_plays_the_baseline_where_improve_has_no_recipe():
    commands = run_episode(lambda m: NoisyPolicy(useful=1.0, submit=1.0).respond(m, random.Random(0)), "x", str)
    assert commands == ["validate", "submit"]


# ----------------------------------------------------------------------------- policies over an episode


def test_improve_playbook_progresses_over_turns(client):
    commands = run_episode(client_ask(client), "loanDefault", lambda command: "done")
    assert commands[0] == "head -3 data/train.csv"
    assert commands[1].startswith("cat > train.py << 'EOF'\n") and commands[1].endswith("\nEOF")
    assert "HistGradientBoostingClassifier" in commands[1] and "'defaulted'" in commands[1]
    assert commands[2:] == ["python train.py", "validate", "submit"]
    regression = run_episode(client_ask(client), "buildingEnergy", lambda command: "done")
    assert "HistGradientBoostingRegressor" in regression[1] and "log1p" in regression[1]
    assert regression[2:] == ["python train.py", "validate", "submit"]


def test_baseline_playbooks_over_an_episode():
    with PolicyServer("baseline") as server, openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0) as c:
        ask = client_ask(c)
        assert run_episode(ask, "buildingEnergy", lambda _: "ok") == ["python baseline.py", "validate", "submit"]
        assert run_episode(ask, "laneMerge", lambda _: "ok") == ["validate", "submit"]
        assert run_episode(ask, "dial", lambda _: "ok") == ["validate", "submit"]
        assert run_episode(ask, "somethingNew", lambda _: "ok") == ["validate", "submit"]


@pytest.mark.parametrize("target", [0, 1, 37, 50, 64, 99, 100])
def test_dial_binary_search_converges_through_the_server(client, target):
    dial = FakeDial(target)
    commands = run_episode(client_ask(client), "dial", dial)
    assert commands[0] == "validate" and commands[-1] == "submit"
    assert dial.setting == target and dial.validates <= 7


def test_dial_binary_search_finds_every_target():
    policy, rng = ImprovePolicy(), random.Random(0)
    for target in range(101):
        dial = FakeDial(target)
        commands = run_episode(lambda messages: policy.respond(messages, rng), "dial", dial)
        assert dial.setting == target, (target, commands)
        assert commands[-1] == "submit" and dial.validates <= 7
        # validate and set alternate after the first probe: no wasted turns
        assert all(a != b for a, b in zip(commands[1:-1], commands[2:-1], strict=False))


def test_dial_gives_up_without_hints():
    policy = ImprovePolicy()
    commands = run_episode(lambda m: policy.respond(m, random.Random(0)), "dial", lambda _: "Score: 0.5")
    assert commands[-1] == "submit" and commands.count("validate") == 7


def test_noisy_is_noisy_but_still_gets_there():
    playbook = [step.command for step in improve_playbook("loanDefault")]
    sequences = []
    for seed in (1, 2):
        with PolicyServer("noisy", seed=seed) as server, openai.OpenAI(base_url=server.base_url, api_key="x") as c:
            sequences += [run_episode(client_ask(c), "loanDefault", lambda _: "ok", max_turns=80) for _ in range(5)]
    assert len({tuple(s) for s in sequences}) > 1, "rollouts must differ"
    replies = [command for sequence in sequences for command in sequence]
    assert None in replies, "some replies must be malformed"
    assert any(c in ("ls -la", "pwd", "cat README.md 2>/dev/null", "echo thinking") for c in replies)
    for sequence in sequences:
        assert sequence[-1] == "submit"
        useful = [c for c in sequence if c in playbook]
        assert useful[: len(playbook) - 1] == playbook[:-1], "useful steps keep their order"


def test_noisy_malformed_replies_are_both_kinds():
    policy, rng = NoisyPolicy(useful=0.0, useless_share=0.0), random.Random(3)
    replies = [policy.respond(opening("loanDefault"), rng) for _ in range(40)]
    fences = {len(re.findall(r"^```bash$", reply, re.MULTILINE)) for reply in replies}
    assert fences == {0, 2}
    assert all(extract_command(reply) is None for reply in replies)


# ----------------------------------------------------------------------------- scripts, replays, specs


def test_script_policy_and_script_spec(tmp_path):
    assert [
        extract_command(ScriptPolicy(["a", "b"]).respond(conversation("x", ["a"] * n), random.Random()))
        for n in range(4)
    ] == ["a", "b", "submit", "submit"]
    script = tmp_path / "steps.json"
    script.write_text(json.dumps(["echo one", "cat > f.txt << 'EOF'\nhi\nEOF"]))
    with PolicyServer(f"script:{script}") as server, openai.OpenAI(base_url=server.base_url, api_key="x") as c:
        assert server.model_name == f"scripted-script:{script}"
        commands = run_episode(client_ask(c), "titanic", lambda _: "ok")
    assert commands == ["echo one", "cat > f.txt << 'EOF'\nhi\nEOF", "submit"]


def test_bad_specs_name_the_problem(tmp_path):
    with pytest.raises(PolicySpecError) as excinfo:
        make_policy("clever")
    assert "'clever'" in str(excinfo.value) and all(spec in str(excinfo.value) for spec in SPECS)
    with pytest.raises(PolicySpecError, match="valid specs"):
        make_policy("script:")
    missing = tmp_path / "missing.json"
    with pytest.raises(PolicySpecError, match=re.escape(str(missing))):
        make_policy(f"script:{missing}")
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"commands": ["ls"]}))
    with pytest.raises(PolicySpecError, match=re.escape(f"{bad} must be a JSON list of strings")):
        make_policy(f"script:{bad}")
    bad.write_text(json.dumps(["ls", 3]))
    with pytest.raises(PolicySpecError, match=r"\(1: "):
        make_policy(f"script:{bad}")


def test_replay_of_a_recorded_trajectory(tmp_path):
    pytest.importorskip("air.env.trajectories", reason="air.env.trajectories is not written yet")
    turn = {"model_text": "", "format_error": None, "output": "", "exit_code": 0}
    record = {
        "schema_version": 1,
        "id": "0123456789abcdef",
        "task": "loanDefault",
        "started_at": "2025-01-01T00:00:00Z",
        "exit_status": "max_turns",
        "baseline": {"metric": "accuracy", "score": 0.7, "higher_is_better": True},
        "turns": [
            {**turn, "index": 1, "command": "ls data"},
            {**turn, "index": 2, "command": None, "format_error": "no block", "exit_code": None},
            {**turn, "index": 3, "command": "python baseline.py"},
            {**turn, "index": 4, "command": "validate"},
        ],
    }
    path = tmp_path / "loanDefault" / "20250101-000000-0123456789ab.json"
    path.parent.mkdir()
    path.write_text(json.dumps(record))
    with PolicyServer(f"replay:{path}") as server, openai.OpenAI(base_url=server.base_url, api_key="x") as c:
        commands = run_episode(client_ask(c), "loanDefault", lambda _: "ok")
    assert commands == ["ls data", "python baseline.py", "validate", "submit"]
    with pytest.raises(PolicySpecError, match="nowhere.json"):
        make_policy(f"replay:{tmp_path / 'nowhere.json'}")


# ----------------------------------------------------------------------------- command line


def test_cli_registrar_and_bad_spec():
    from air.cli.errors import CommandError

    parser = argparse.ArgumentParser(prog="air")
    register_policy_server(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["policy-server"])
    assert (args.policy, args.port, args.host, args.seed) == ("baseline", 8008, "127.0.0.1", 0)
    args = parser.parse_args(["policy-server", "--policy", "nonsense", "--port", "0"])
    with pytest.raises(CommandError, match="valid specs"):
        args.func(args)


def test_serve_forever_prints_the_url_serves_and_stops_on_ctrl_c():
    code = (
        "import sys; from air.serving.server import serve_forever; "
        "sys.exit(serve_forever('noisy', port=0, seed=3, hints=lambda url, model: [f'client --url {url} -m {model}']))"
    )
    output = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT, "text": True}
    process = subprocess.Popen([sys.executable, "-c", code], **output)
    try:
        lines = []
        while not lines or not lines[-1].startswith("Press Ctrl-C"):
            line = process.stdout.readline()
            assert line, f"server exited early: {lines}"
            lines.append(line.strip())
        url = re.search(r"http://127\.0\.0\.1:\d+/v1", lines[0]).group(0)
        assert lines[1:3] == ["Point a client at it, e.g.:", f"client --url {url} -m scripted-noisy"]
        with openai.OpenAI(base_url=url, api_key="x", max_retries=0) as c:
            assert [m.id for m in c.models.list()] == ["scripted-noisy"]
        process.send_signal(signal.SIGINT)
        try:
            # Generous: it once ran past 30 s on a host loaded with a second test suite.
            rest, _ = process.communicate(timeout=backstop(60))
        except subprocess.TimeoutExpired:
            process.kill()
            rest, _ = process.communicate()
            pytest.fail(f"still running 60 s after Ctrl-C; it printed: {rest!r}")
        assert process.returncode == 0, rest
        assert "Stopping." in rest
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


# ----------------------------------------------------------------------------- the playbooks still work


def _lay_out(task_name: str, workspace: Path) -> None:
    for rel, source in load_task(task_name, BUILTIN_TASK_ROOT).workspace_files().items():
        target = workspace / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(source.read_bytes())


def _evaluate(task_name: str, workspace: Path) -> dict:
    args = ["--submission_file", "submission.csv"] if task_name != "laneMerge" else []
    result = subprocess.run(
        [sys.executable, "evaluate.py", *args], cwd=workspace, capture_output=True, text=True, timeout=backstop(120)
    )
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


@pytest.mark.parametrize("task_name", ["loanDefault", "buildingEnergy", "laneMerge"])
def test_improve_playbook_beats_the_baseline_on_the_host(client, tmp_path, task_name):
    """Runs the improve policy's commands for real (bash, this Python), as a guard against rot."""
    if task_name != "laneMerge":
        pytest.importorskip("sklearn")
    task = load_task(task_name, BUILTIN_TASK_ROOT)
    workspace = tmp_path / "ws"
    _lay_out(task_name, workspace)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    scores: list[float] = []

    def execute(command: str) -> str:
        if command == "validate":
            metrics = _evaluate(task_name, workspace)
            scores.append(metrics[task.primary_metric])
            return f"Baseline Score: {task.baseline}\nEvaluation Score: {metrics}"
        result = subprocess.run(
            ["bash", "-c", command], cwd=workspace, env=env, capture_output=True, text=True, timeout=backstop(300)
        )
        assert result.returncode == 0, f"{command!r} failed:\n{result.stderr}"
        return result.stdout + result.stderr

    commands = run_episode(client_ask(client), task_name, execute)
    assert commands[-1] == "submit" and len(scores) == 1, commands
    better = scores[0] > task.baseline_score if task.higher_is_better else scores[0] < task.baseline_score
    assert better, (scores[0], task.baseline_score)
