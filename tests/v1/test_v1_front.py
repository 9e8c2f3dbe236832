"""The v1 front against the real verifiers 0.4.0 (run in `.venv-v1`; scripts/test.sh): verifiers' own
plugin loader finds the taskset and env, and verifiers' own `vf-eval` runs episodes in real containers
against our scripted policy server, scoring them from the trace the env records."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from air.serving.server import PolicyServer

verifiers_v1 = pytest.importorskip("verifiers.v1")
from verifiers.v1.utils import loaders  # noqa: E402

VF_EVAL = Path(sys.executable).parent / "vf-eval"
TASKSET = "air_mlgym"


def _config(**fields):
    return loaders.taskset_config_type(TASKSET)(id=TASKSET, **fields)


def test_the_plugin_loader_finds_the_taskset_and_the_env() -> None:
    from air.env.v1_front import MLGymTaskset, MLGymTasksetConfig, MLGymV1Env

    assert loaders.taskset_class(TASKSET) is MLGymTaskset
    assert loaders.taskset_config_type(TASKSET) is MLGymTasksetConfig
    assert loaders.environment_class(TASKSET) is MLGymV1Env


def test_the_taskset_config_takes_the_env_arguments_and_names_a_typo() -> None:
    config = _config(task_configs="laneMerge", max_turns=7, reward={"format_error_penalty": 0.2})
    settings = config.env_settings()
    assert settings.task_configs == ["laneMerge"] and settings.max_turns == 7
    with pytest.raises(Exception, match="max_turn"):
        _config(max_turn=7)


def test_tasks_are_listed_without_a_container_and_travel_as_json() -> None:
    taskset = loaders.load_taskset(_config(num_examples_per_task=2))
    tasks = list(taskset)
    names = {task.data.task_name for task in tasks}
    assert names == set(taskset.core.tasks) and len(tasks) == 2 * len(names)
    assert sorted(task.data.idx for task in tasks) == list(range(len(tasks)))
    for task in tasks:
        wire = json.loads(json.dumps(task.data.model_dump(mode="json")))  # what the env server receives
        again = type(task.data).model_validate(wire)
        assert again == task.data
        assert again.prompt.startswith(f"# Task: {again.task_name}") and again.system_prompt


def _vf_eval(tmp_path: Path, base_url: str, *args: str) -> list[dict]:
    out = tmp_path / "evals"
    command = [
        str(VF_EVAL), TASKSET, "-m", "scripted", "--client.base-url", base_url,
        "--client.api-key-var", "AIR_TEST_KEY", "--no-push", "--no-rich", "-o", str(out),
        "--env.taskset.trajectory-dir", str(tmp_path / "trajectories"), "--env.taskset.run-id", _run_id(tmp_path),
        *args,
    ]  # fmt: skip
    env = {**os.environ, "AIR_TEST_KEY": "x"}
    done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    traces = list(out.rglob("traces.jsonl"))
    assert len(traces) == 1, traces
    return [json.loads(line) for line in traces[0].read_text().splitlines() if line.strip()]


def _run_id(tmp_path: Path) -> str:
    """This test's own container label: a suite running beside this one must not count as a leftover."""
    return f"pytest-v1-{os.getpid()}-{tmp_path.name}"


def _our_containers(tmp_path: Path) -> list:
    client = docker.from_env()
    return client.containers.list(all=True, filters={"label": f"air.run={_run_id(tmp_path)}"}, ignore_removed=True)


@pytest.mark.docker
def test_vf_eval_scores_air_mlgym_rollouts(docker_image: str, tmp_path: Path) -> None:
    with PolicyServer("improve") as server:
        episodes = _vf_eval(
            tmp_path, server.base_url, "-n", "1", "-r", "2",
            "--env.taskset.task-configs", '["laneMerge"]', "--env.taskset.max-turns", "6",
        )  # fmt: skip
    assert len(episodes) == 2
    for episode in episodes:
        assert episode["ok"], episode["errors"]
        (trace,) = episode["traces"]
        assert trace["agent"]["config"]["harness"]["id"] == "air_mlgym", "the seat's default: the in-process player"
        reward = trace["rewards"]["mlgym_reward"]["score"]
        assert reward > 0, "the improve policy beats laneMerge's baseline"
        assert trace["metrics"]["submitted"] == 1.0 and trace["metrics"]["laneMerge/best_score"] > 0
        record = json.loads(Path(trace["info"]["trajectory_path"]).read_text())
        assert record["reward"] == pytest.approx(reward) and record["exit_status"] == "submitted"
        assert record["model"] == "scripted"  # the model the calls asked for (the env is not told it otherwise)
        commands = [turn["command"] for turn in record["turns"]]
        assert commands[-1].strip() == "submit" and len(commands) == trace["metrics"]["turns"]
        # the conversation the model saw is the one the env answered: one model message per turn
        assert sum(1 for node in trace["nodes"] if node.get("sampled")) == len(commands)
    assert _our_containers(tmp_path) == []


@pytest.mark.docker
def test_vf_eval_seats_the_null_harness_when_asked(docker_image: str, tmp_path: Path) -> None:
    with PolicyServer("improve") as server:
        (episode,) = _vf_eval(
            tmp_path, server.base_url, "-n", "1", "-r", "1", "--env.player.harness.id", "null",
            "--env.taskset.task-configs", '["laneMerge"]', "--env.taskset.max-turns", "6",
        )  # fmt: skip
    assert episode["ok"], episode["errors"]
    (trace,) = episode["traces"]
    assert trace["agent"]["config"]["harness"]["id"] == "null"
    assert trace["rewards"]["mlgym_reward"]["score"] > 0 and trace["info"]["exit_status"] == "submitted"


@pytest.mark.docker
def test_max_turns_plays_the_last_reply_and_evaluates(docker_image: str, tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps(["echo one", "echo two", "echo three"]))
    with PolicyServer(f"script:{script}") as server:
        (episode,) = _vf_eval(
            tmp_path, server.base_url, "-n", "1", "-r", "1",
            "--env.taskset.task-configs", '["laneMerge"]', "--env.taskset.max-turns", "2",
        )  # fmt: skip
    (trace,) = episode["traces"]
    record = json.loads(Path(trace["info"]["trajectory_path"]).read_text())
    assert [turn["command"] for turn in record["turns"]] == ["echo one", "echo two"]
    assert "two" in record["turns"][-1]["output"]
    assert record["exit_status"] == "max_turns" and record["final_evaluation"]["kind"] == "final"
    assert trace["metrics"]["turns"] == 2.0


@pytest.mark.docker
def test_a_fault_outside_the_agent_fails_the_trace_with_its_cause(docker_image: str, tmp_path: Path) -> None:
    with PolicyServer("baseline") as server:
        (episode,) = _vf_eval(
            tmp_path, server.base_url, "-n", "1", "-r", "1",
            "--env.taskset.task-configs", '["laneMerge"]', "--env.taskset.image", "air-test/no-such-image:0",
        )  # fmt: skip
    assert not episode["ok"]
    errors = episode["errors"] + [e for trace in episode["traces"] for e in trace["errors"]]
    assert any(e["type"] == "SandboxError" and "air-test/no-such-image:0" in e["message"] for e in errors), errors
    assert all(not trace["rewards"] for trace in episode["traces"]), "a failed trace carries no reward"
    assert _our_containers(tmp_path) == []


def test_a_failed_episode_can_be_built_from_a_dispatched_task_as_prime_rl_does() -> None:
    """prime-rl 559b447's dispatcher, when an env server answers with an error: a WireEpisode holding the
    dispatched task's own data. Our task data must validate there, or the orchestrator stops."""
    (task, *_) = list(loaders.load_taskset(_config()))
    trace_task = verifiers_v1.TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash)
    episode = verifiers_v1.WireEpisode(env=verifiers_v1.EnvInfo(id="lane"), task=trace_task, ok=False)
    assert episode.task.data.task_name == task.data.task_name and not episode.ok
