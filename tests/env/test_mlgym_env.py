"""air_mlgym end to end, through verifiers' real rollout path: the real openai client over HTTP to
the scripted policy server on loopback, real containers, the built-in tasks."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import docker
import pytest
import verifiers as vf
from openai import AsyncOpenAI

import air_mlgym
from air.env.settings import EnvSettingsError
from air.env.trajectory_reader import iter_trajectory_paths
from air.policies.scripted import ScriptPolicy
from air.sandbox.config import LABEL, LABEL_RUN
from air.sandbox.removal import wait_for_removals
from air.serving.server import PolicyServer
from air.tasks.loader import load_task
from air.tasks.workspace import evaluation_seed
from rigs.patience import backstop
from tests.red_team import honest_score
from tests.rollouts import make_env, run_group, trajectories

BETTER_STRATEGY = textwrap.dedent(
    """\
    cat > strategy.py << 'EOF'
    def row_strategy(history):
        return 0 if len(history) % 3 == 2 else 1
    EOF"""
)


class TextPolicy:
    """Replies with the given texts verbatim (malformed ones included), then submits."""

    def __init__(self, texts: list[str]) -> None:
        self.texts = texts

    def respond(self, messages, rng) -> str:
        turn = sum(1 for m in messages if m["role"] == "assistant")
        return self.texts[turn] if turn < len(self.texts) else "```bash\nsubmit\n```"


def progress(task_name: str, score: float) -> float:
    task = load_task(task_name)
    sign = 1 if task.higher_is_better else -1
    return sign * (score - task.baseline_score) / abs(task.baseline_score)


def our_containers(run_id: str) -> list:
    """This run's containers as one listing (id and state), nothing inspected: a container removed meanwhile
    cannot fail the call."""
    client = docker.from_env()
    return client.containers.list(all=True, filters={"label": [f"{LABEL}=1", f"{LABEL_RUN}={run_id}"]}, sparse=True)


# ------------------------------------------------------------------------------ loading (no Docker)


def test_unknown_and_mistyped_arguments_name_the_key():
    with pytest.raises(EnvSettingsError, match=r"max_turn: unknown argument \(did you mean 'max_turns'\?\)"):
        air_mlgym.load_environment(max_turn=5)
    with pytest.raises(EnvSettingsError, match="num_examples_per_task"):
        air_mlgym.load_environment(num_examples_per_task="many")
    with pytest.raises(EnvSettingsError, match=r"reward\.format_penalty: unknown argument"):
        air_mlgym.load_environment(reward={"format_penalty": 1})
    with pytest.raises(RuntimeError, match="command_timeout"):  # through verifiers' loader, as prime-rl calls it
        vf.load_environment("air_mlgym", command_timeout=-1)


def test_unknown_task_lists_the_known_ones():
    with pytest.raises(ValueError, match="Known tasks: buildingEnergy, laneMerge, loanDefault"):
        air_mlgym.load_environment(task_configs=["titanic.yaml"])


def test_dataset_has_one_row_per_task_and_example():
    env = air_mlgym.load_environment(task_configs=["laneMerge.yaml", "loanDefault"], num_examples_per_task=3)
    rows = env.get_dataset().to_list()
    assert sorted(r["task"] for r in rows) == ["laneMerge"] * 3 + ["loanDefault"] * 3
    assert len({r["example_id"] for r in rows}) == 6
    lane = next(r for r in rows if r["task"] == "laneMerge")
    system, user = lane["prompt"]
    assert system["role"] == "system" and "validate" in system["content"] and "submit" in system["content"]
    assert "exactly one" in system["content"].lower()
    assert user["content"].splitlines()[0] == "# Task: laneMerge"
    assert "strategy.py" in user["content"] and "evaluate.py" in user["content"]
    assert "target.py" not in user["content"]  # a secret file is not listed
    assert "2.1239" in user["content"]  # the baseline to beat


def test_loading_starts_no_container(docker_image):
    # Only this env's run is looked at: other runs and suites on the host start containers meanwhile.
    run_id = f"pytest-load-{os.getpid()}"
    env = air_mlgym.load_environment(image=docker_image, pool_size=8, run_id=run_id)
    assert env.get_dataset() is not None
    assert env.settings.run_id == run_id and our_containers(run_id) == []


# ------------------------------------------------------------------------------ rollouts


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_eight_concurrent_rollouts_improve_and_are_recorded(tmp_path, docker_image):
    env = make_env(tmp_path, docker_image, max_turns=6, task_configs=["laneMerge"])
    commands = ["cat strategy.py | head -5", BETTER_STRATEGY, "validate", "submit"]
    outputs = await run_group(env, ScriptPolicy(commands), "laneMerge", n=8)
    assert [o.get("error") for o in outputs] == [None] * 8
    records = trajectories(tmp_path)
    assert len(records) == 8
    # All eight ran at once: every rollout started before any finished.
    assert max(r.started_at for r in records) < min(r.finished_at for r in records)
    # One group, one evaluation seed: the same commands score the same in every rollout.
    assert len({r.evaluation_seed for r in records}) == 1 and records[0].evaluation_seed is not None
    assert len({o["metrics"]["laneMerge/final_score"] for o in outputs}) == 1
    for output, record in zip(outputs, sorted(records, key=lambda r: r.id), strict=False):
        metrics = output["metrics"]
        assert metrics["validates"] == 1 and metrics["submitted"] == 1 and metrics["format_errors"] == 0
        assert metrics["laneMerge/final_score"] > metrics["laneMerge/baseline_score"] + 0.2
        assert output["reward"] == pytest.approx(progress("laneMerge", metrics["laneMerge/final_score"]), abs=1e-9)
        assert record.exit_status == "submitted"
        assert [t.command for t in record.turns] == commands
        assert record.turns[2].evaluation.kind == "validate"
        validated, submitted = record.turns[2].evaluation.score, record.turns[3].evaluation.score
        assert record.turns[2].step_reward == pytest.approx(progress("laneMerge", validated), abs=1e-9)
        # The submit is evaluated again, under the next seed: its step reward is the progress since.
        step = progress("laneMerge", submitted) - progress("laneMerge", validated)
        assert record.turns[3].step_reward == pytest.approx(step, abs=1e-9)
        assert "Evaluation Score:" in record.turns[2].output and "turn 3 of 6" in record.turns[2].output
    assert await asyncio.to_thread(wait_for_removals, backstop(60))  # removed in the background: done by now
    assert all(c.status != "running" for c in our_containers(env.settings.run_id))


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_a_killed_container_masks_only_its_rollout(tmp_path, docker_image):
    env = make_env(tmp_path, docker_image, max_turns=4)
    run_id = env.settings.run_id

    earlier = {c.id for c in our_containers(run_id)}  # an earlier test's, maybe still being removed

    async def kill_one() -> str:
        # The first of this group's containers seen inside the long command (not in set-up, however slow the
        # host): no guess of how long set-up takes.
        while True:
            for container in await asyncio.to_thread(our_containers, run_id):
                if container.id in earlier or container.status != "running":
                    continue
                try:
                    found = await asyncio.to_thread(container.exec_run, ["pgrep", "-f", "sleep 6"])
                except docker.errors.APIError:
                    continue  # gone meanwhile
                if found.exit_code == 0:
                    await asyncio.to_thread(container.kill)
                    return container.id
            await asyncio.sleep(0.1)

    policy = ScriptPolicy(["sleep 6; echo slept", "validate", "submit"])
    outputs, _ = await asyncio.gather(run_group(env, policy, "laneMerge", n=4), kill_one())
    errors = [o for o in outputs if o.get("error")]
    assert len(errors) == 1, [o.get("error") for o in outputs]
    assert "SandboxError" in json.dumps(errors[0]["error"]) or "Sandbox" in str(errors[0]["error"])
    assert errors[0]["reward"] == 0.0
    for o in outputs:
        if not o.get("error"):
            assert o["metrics"]["validates"] == 1 and o["metrics"]["submitted"] == 1
    statuses = sorted(r.exit_status for r in trajectories(tmp_path))
    assert statuses == ["error", "submitted", "submitted", "submitted"]


@pytest.mark.docker
@pytest.mark.timeout(180)
async def test_max_turns_still_runs_the_last_command_and_scores_it(tmp_path, docker_image):
    env = make_env(tmp_path, docker_image, max_turns=2, task_configs=["laneMerge"])
    outputs = await run_group(env, ScriptPolicy(["ls", BETTER_STRATEGY]), "laneMerge")
    (output,) = outputs
    assert output.get("error") is None
    (record,) = trajectories(tmp_path)
    assert record.exit_status == "max_turns"
    assert [t.command for t in record.turns] == ["ls", BETTER_STRATEGY]
    assert record.turns[-1].executed_after_last_turn
    assert record.final_evaluation is not None and record.final_evaluation.kind == "final"
    # Never validated, yet the better strategy written on the very last turn earns its reward.
    assert output["metrics"]["validates"] == 0
    assert output["metrics"]["laneMerge/final_score"] > output["metrics"]["laneMerge/baseline_score"] + 0.2
    final = output["metrics"]["laneMerge/final_score"]
    assert output["reward"] == pytest.approx(progress("laneMerge", final), abs=1e-9)
    assert output["completion"][-1]["role"] == "user"  # the last command's output closes the completion
    assert "turn 2 of 2" in output["completion"][-1]["content"]


@pytest.mark.docker
@pytest.mark.timeout(180)
async def test_an_agent_that_never_validates_gets_its_final_score(tmp_path, docker_image):
    env = make_env(tmp_path, docker_image, max_turns=2, task_configs=["loanDefault"])
    (output,) = await run_group(env, ScriptPolicy(["python baseline.py", "ls -la submission.csv"]), "loanDefault")
    assert output.get("error") is None
    metrics = output["metrics"]
    assert metrics["scored"] == 1 and metrics["validates"] == 0
    assert metrics["loanDefault/final_score"] == pytest.approx(load_task("loanDefault").baseline_score, abs=1e-4)
    assert output["reward"] == pytest.approx(0.0, abs=1e-3)


@pytest.mark.docker
@pytest.mark.timeout(180)
async def test_no_submission_is_penalised_not_fatal(tmp_path, docker_image):
    env = make_env(tmp_path, docker_image, max_turns=3)
    (output,) = await run_group(env, ScriptPolicy(["validate", "ls"]), "loanDefault")
    assert output.get("error") is None
    (record,) = trajectories(tmp_path)
    assert record.turns[0].evaluation.status == "submission_not_found"
    assert "failed" in record.turns[0].output.lower()
    assert output["metrics"]["scored"] == 0
    reward = env.settings.reward
    assert output["reward"] == pytest.approx(-reward.clip - reward.no_score_penalty)


@pytest.mark.docker
@pytest.mark.timeout(180)
async def test_format_errors_are_observations_and_end_the_rollout_when_repeated(tmp_path, docker_image):
    env = make_env(tmp_path, docker_image, max_turns=10, max_consecutive_format_errors=3)
    texts = [
        "<think>what now</think>I should look at the files first.",
        "```bash\nls\n```\nand then\n```bash\npwd\n```",
        "Let me think about the strategy for a while.",
    ]
    (output,) = await run_group(env, TextPolicy(texts), "laneMerge")
    assert output.get("error") is None
    (record,) = trajectories(tmp_path)
    assert record.exit_status == "format_errors"
    assert [t.command for t in record.turns] == [None, None, None]
    assert all(t.output.startswith("Format error") for t in record.turns)
    assert "2" in record.turns[1].format_error  # says how many blocks it found
    metrics = output["metrics"]
    assert metrics["format_errors"] == 3 and metrics["scored"] == 1  # the untouched workspace was evaluated
    # ... under the rollout's first evaluation seed: the starter's score there, not the recorded baseline
    final = record.final_evaluation.score
    assert final == honest_score(evaluation_seed(record.evaluation_seed, 0))
    penalty = 3 * env.settings.reward.format_error_penalty
    assert output["reward"] == pytest.approx(progress("laneMerge", final) - penalty, abs=1e-9)


@pytest.mark.docker
@pytest.mark.timeout(180)
async def test_a_hung_command_times_out_as_an_observation(tmp_path, docker_image):
    env = make_env(tmp_path, docker_image, max_turns=3, command_timeout=1)
    (output,) = await run_group(env, ScriptPolicy(["sleep 30", "echo still-here", "submit"]), "laneMerge")
    assert output.get("error") is None
    (record,) = trajectories(tmp_path)
    assert record.turns[0].timed_out and "timed out" in record.turns[0].output
    assert "still-here" in record.turns[1].output and record.turns[1].exit_code == 0
    assert output["metrics"]["timeouts"] == 1 and output["metrics"]["submitted"] == 1


@pytest.mark.docker
@pytest.mark.timeout(180)
async def test_long_output_is_capped_head_and_tail(tmp_path, docker_image):
    env = make_env(tmp_path, docker_image, max_turns=2, observation_max_chars=600)
    (output,) = await run_group(env, ScriptPolicy(["seq 1 100000", "submit"]), "laneMerge")
    (record,) = trajectories(tmp_path)
    shown = record.turns[0].output
    assert len(shown) < 800
    assert shown.startswith("1\n2\n3\n") and "100000" in shown and "characters cut" in shown


# ------------------------------------------------------------------------------ vf-eval


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_vf_eval_against_the_scripted_server_saves_results(tmp_path, docker_image):
    vf_eval = Path(sys.executable).with_name("vf-eval")
    args = {
        "task_configs": ["laneMerge"],
        "max_turns": 4,
        "image": docker_image,
        "trajectory_dir": str(tmp_path / "trajectories"),
        "container_cpus": 1.0,
    }
    with PolicyServer(ScriptPolicy([BETTER_STRATEGY, "validate", "submit"])) as server:
        result = subprocess.run(
            [str(vf_eval), "air_mlgym", "-b", server.base_url, "-m", server.model_name, "-k", "AIR_TEST_KEY"]
            + ["-n", "1", "-r", "2", "-a", json.dumps(args), "-s", "-d"],
            cwd=tmp_path,
            env={**os.environ, "AIR_TEST_KEY": "scripted"},
            capture_output=True,
            text=True,
            timeout=backstop(280),
        )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    (results,) = list(tmp_path.glob("outputs/evals/air_mlgym--*/*/results.jsonl"))
    lines = [json.loads(line) for line in results.read_text().splitlines()]
    assert len(lines) == 2
    assert all(line["reward"] > 0.1 for line in lines)
    assert len(list(iter_trajectory_paths(tmp_path / "trajectories"))) == 2


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_prime_rl_env_group_routes_by_info_and_names_metrics_per_task(tmp_path, docker_image):
    """prime-rl wraps every [[orchestrator.env]] in vf.EnvGroup, which overwrites the `task` column
    with the env's name; env workers then run the sub-env directly on those rows."""
    lane = make_env(tmp_path, docker_image, max_turns=4, task_configs=["laneMerge"])
    loan = make_env(tmp_path, docker_image, max_turns=4, task_configs=["loanDefault"])
    group = vf.EnvGroup(envs=[lane, loan], env_names=["mlgym-lane", "mlgym-loan"])
    rows = group.get_dataset().to_list()
    assert sorted({r["task"] for r in rows}) == ["mlgym-lane", "mlgym-loan"]
    lane_row = next(r for r in rows if r["task"] == "mlgym-lane")
    policy = ScriptPolicy([BETTER_STRATEGY, "validate", "submit"])
    with PolicyServer(policy) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        try:
            through_group = await group.run_group([lane_row] * 2, client, server.model_name, {})
            direct = await lane.run_group([lane_row], client, server.model_name, {})  # an env worker's view
        finally:
            await client.close()
    for output in [*through_group, *direct]:
        assert output.get("error") is None, output.get("error")
        metrics = output["metrics"]
        assert metrics["laneMerge/final_score"] > metrics["laneMerge/baseline_score"] + 0.2
        assert output["reward"] == pytest.approx(progress("laneMerge", metrics["laneMerge/final_score"]), abs=1e-9)
    assert {r.task for r in trajectories(tmp_path)} == {"laneMerge"}


def test_raw_score_metrics_are_named_per_task_and_left_out_when_tasks_mix():
    from air.env.metrics import metric_names

    single = metric_names(["titanic"])
    assert single[:3] == ["titanic/baseline_score", "titanic/best_score", "titanic/final_score"]
    mixed = metric_names(["titanic", "prisonersDilemma"])
    assert not any(name.endswith("_score") for name in mixed)  # accuracy averaged with game scores means nothing
    assert "improvement" in mixed and "validates" in mixed


def test_readme_documents_every_env_argument():
    from air.env.settings import MLGymEnvSettings

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    missing = [name for name in MLGymEnvSettings.model_fields if f"`{name}`" not in readme]
    assert not missing, f"README's argument table lacks {missing}"


@pytest.mark.docker
@pytest.mark.timeout(180)
async def test_mlgym_commands_from_the_task_root_work_in_rollouts(tmp_path, docker_image):
    from tests.mlgym_like import write_mlgym_like_root, write_mlgym_like_tools

    root = write_mlgym_like_root(tmp_path / "mlgym")
    write_mlgym_like_tools(root)
    env = make_env(tmp_path, docker_image, task_root=str(root), task_configs=["shipwreck"], max_turns=6)
    system = env.get_dataset()[0]["prompt"][0]["content"]
    assert "edit <first>:<last>" in system and "end_of_edit" in system and "wordcount <path>" in system
    commands = ["python baseline.py", "open submission.csv", "edit 2:2\n101,1\nend_of_edit", "validate", "submit"]
    (output,) = await run_group(env, ScriptPolicy(commands), "shipwreck")
    assert output.get("error") is None
    (record,) = trajectories(tmp_path)
    assert "2|101,0" in record.turns[1].output  # the checkout's viewer, with its env variables
    assert "2|101,1" in record.turns[2].output  # the multi-line edit reached the function
    assert [t.evaluation.score for t in record.turns if t.evaluation] == [0.55, 0.55]
    assert output["reward"] == pytest.approx((0.55 - 0.5) / 0.5)
