"""The in-process player (harness id ``air_mlgym``) against the real verifiers 0.4.0, episodes driven
through verifiers' own ``Env.run_episode`` in this process: no program is started for a turn or an
episode, the trace and our trajectory agree, the ``null`` harness still plays (and starts programs), and a
failed or hung model call fails the trace with the endpoint's words instead of holding the episode."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from air.serving.server import PolicyServer

pytest.importorskip("verifiers.v1")
from verifiers.v1.clients import ModelContext  # noqa: E402
from verifiers.v1.configs.client import EvalClientConfig  # noqa: E402
from verifiers.v1.utils import loaders  # noqa: E402

TASKSET = "air_mlgym"


def test_the_player_is_the_seats_default_and_null_stays_a_choice() -> None:
    from air.env.v1_player import MLGymPlayer, MLGymPlayerConfig

    assert loaders.harness_class(TASKSET) is MLGymPlayer
    assert loaders.default_harness_id(TASKSET) == TASKSET
    default = loaders.resolve_env_config({"taskset": {"id": TASKSET}})
    assert isinstance(default.player.harness, MLGymPlayerConfig) and default.player.runtime.type == "subprocess"
    null = loaders.resolve_env_config({"taskset": {"id": TASKSET}, "player": {"harness": {"id": "null"}}})
    assert null.player.harness.id == "null"
    tuned = {"harness": {"id": TASKSET, "model_timeout": 5, "model_retries": 0}}
    harness = loaders.resolve_env_config({"taskset": {"id": TASKSET}, "player": tuned}).player.harness
    assert (harness.model_timeout, harness.model_retries) == (5.0, 0)
    typo = {"harness": {"id": TASKSET, "model_timout": 5}}
    with pytest.raises(Exception, match="model_timout"):
        loaders.resolve_env_config({"taskset": {"id": TASKSET}, "player": typo})


def _run_id(tmp_path: Path) -> str:
    return f"pytest-v1p-{os.getpid()}-{tmp_path.name}"


def _episodes(tmp_path: Path, base_url: str, episodes: int = 1, player: dict | None = None, **taskset) -> list:
    """``episodes`` episodes of laneMerge's first task, run by verifiers' own env machinery here."""
    data: dict = {
        "taskset": {
            "id": TASKSET,
            "task_configs": ["laneMerge"],
            "trajectory_dir": str(tmp_path / "trajectories"),
            "run_id": _run_id(tmp_path),
            **taskset,
        }
    }
    if player is not None:
        data["player"] = player
    env = loaders.load_environment(loaders.resolve_env_config(data))
    task = next(iter(env.taskset))
    ctx = ModelContext(model="scripted", client=EvalClientConfig(base_url=base_url, api_key_var="AIR_TEST_KEY"))

    async def run() -> list:
        async with env.serving():
            return await asyncio.gather(*(env.run_episode(task, ctx) for _ in range(episodes)))

    return asyncio.run(run())


@pytest.fixture
def programs(monkeypatch) -> list[str]:
    """Every program started in this process, by asyncio or subprocess (the null harness's way and any).
    What verifiers asks once per process for a trace's provenance (its package's git commit, ``uname -p``)
    is asked before counting: it is neither per turn nor per episode."""
    import platform

    from verifiers.v1.utils.version import verifiers_commit

    verifiers_commit()
    platform.uname().processor  # noqa: B018 (computed on first access, by running uname -p)
    platform.platform()
    started: list[str] = []
    original_exec, original_popen = asyncio.create_subprocess_exec, subprocess.Popen.__init__

    async def counting_exec(program, *args, **kwargs):
        started.append(str(program))
        return await original_exec(program, *args, **kwargs)

    def counting_popen(self, args, *rest, **kwargs):
        started.append(str(args if isinstance(args, str) else args[0]))
        return original_popen(self, args, *rest, **kwargs)

    monkeypatch.setattr(asyncio, "create_subprocess_exec", counting_exec)
    monkeypatch.setattr(subprocess.Popen, "__init__", counting_popen)
    monkeypatch.setenv("AIR_TEST_KEY", "x")
    return started


def _record(trace) -> dict:
    return json.loads(Path(trace.info["trajectory_path"]).read_text())


@pytest.mark.docker
def test_episodes_start_no_program_and_the_trace_is_the_conversation(docker_image, tmp_path, programs) -> None:
    with PolicyServer("improve") as server:
        episodes = _episodes(tmp_path, server.base_url, episodes=2, max_turns=6)
    # The sandbox's own, per container (its writable layer's file system, disk_image), are not the player's.
    player = [program for program in programs if program not in ("mkfs.ext4", "mount", "umount")]
    assert player == [], f"the in-process player started programs: {player}"
    for episode in episodes:
        assert episode.ok, episode.errors
        (trace,) = episode.traces
        assert trace.agent.config.harness.id == TASKSET
        record = _record(trace)
        assert record["exit_status"] == "submitted" and trace.reward > 0
        assert record["reward"] == pytest.approx(trace.reward)
        sampled = [node for node in trace.nodes if node.sampled]
        assert len(sampled) == len(record["turns"]), "one model call per turn"
        # each turn's reply is the reply the env acted on, and the observation the next turn's prompt
        assert [node.message.content.strip() for node in sampled] == [t["model_text"].strip() for t in record["turns"]]
        users = [node.message.content for node in trace.nodes if node.message.role == "user"]
        assert users[1:] == [t["output"] for t in record["turns"][:-1]]


@pytest.mark.docker
def test_the_null_harness_still_plays_an_episode(docker_image, tmp_path, programs) -> None:
    with PolicyServer("improve") as server:
        (episode,) = _episodes(tmp_path, server.base_url, player={"harness": {"id": "null"}}, max_turns=6)
    assert episode.ok, episode.errors
    (trace,) = episode.traces
    assert trace.agent.config.harness.id == "null" and _record(trace)["exit_status"] == "submitted"
    assert programs, "the null harness runs a chat program (its uv script) per turn"


class _Endpoint(BaseHTTPRequestHandler):
    """A broken model endpoint: answers 503 with an OpenAI error body, or (``hang``) nothing for a while."""

    hang = 0.0

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.hang:
            threading.Event().wait(self.hang)
            return
        body = json.dumps({"error": {"message": "engine overloaded: shed 17 requests", "type": "overloaded"}}).encode()
        self.send_response(503)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def broken_endpoint():
    def start(hang: float = 0.0) -> str:
        handler = type("Handler", (_Endpoint,), {"hang": hang})
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return f"http://127.0.0.1:{server.server_address[1]}/v1"

    servers: list[ThreadingHTTPServer] = []
    yield start
    for server in servers:
        server.shutdown()
        server.server_close()


@pytest.mark.docker
def test_a_failed_model_call_fails_the_trace_with_the_endpoints_words(
    docker_image, tmp_path, programs, broken_endpoint
) -> None:
    (episode,) = _episodes(tmp_path, broken_endpoint())
    (trace,) = episode.traces
    assert not episode.ok and not trace.ok and not trace.rewards
    assert "engine overloaded: shed 17 requests" in trace.last_error.message
    record = _record(trace)
    assert record["exit_status"] == "error" and record["reward"] is None and record["turns"] == []
    assert "engine overloaded: shed 17 requests" in record["error"] and record["final_evaluation"] is None


@pytest.mark.docker
def test_a_hung_model_call_fails_within_the_model_timeout(docker_image, tmp_path, programs, broken_endpoint):
    player = {"harness": {"id": TASKSET, "model_timeout": 2, "model_retries": 0}}
    (episode,) = _episodes(tmp_path, broken_endpoint(hang=60), player=player)
    (trace,) = episode.traces
    assert not trace.ok and "no answer in 2 s" in trace.last_error.message
    assert trace.timing.agent.end - trace.timing.agent.start < 30, "the episode was held, not failed"
    assert "no answer in 2 s" in _record(trace)["error"]
