"""Standalone mode (the main job without GPUs) and replay of recorded trajectories."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from air.cli.main import main
from air.env.trajectory_reader import iter_trajectory_paths, load_trajectory
from air.runs.replay import replay_trajectory, scores_match
from air.runs.standalone import StandaloneSettings, group_advantages, run_standalone, step_statistics
from rigs.patience import backstop
from tests.mlgym_like import write_mlgym_like_root


def test_advantages_are_reward_minus_group_mean():
    assert group_advantages([1.0, 0.0, 0.5, 0.5]) == [0.5, -0.5, 0.0, 0.0]
    assert group_advantages([]) == []


def test_step_statistics_count_zero_advantage_groups_and_mask_errors():
    def out(reward, validates=1.0, error=None):
        return {"reward": reward, "metrics": {"validates": validates, "final_score": reward}, "error": error}

    groups = [[out(0.2), out(0.2)], [out(0.1), out(0.3, 3.0)], [out(0.0, error={"error": "SandboxError"}), out(0.4)]]
    stats = step_statistics(0, groups, 1.5)
    assert stats["rollouts"] == 6 and stats["masked"] == 1
    assert stats["zero_advantage_groups"] == pytest.approx(2 / 3)  # the equal pair, and the one-survivor group
    assert stats["reward_mean"] == pytest.approx((0.2 + 0.2 + 0.1 + 0.3 + 0.4) / 5)
    assert stats["validates_per_rollout"] == pytest.approx(7 / 5)


def test_batch_must_divide_into_groups():
    with pytest.raises(ValueError, match="divisible by rollouts_per_example"):
        StandaloneSettings(batch_size=6, rollouts_per_example=4)


async def test_standalone_on_simple_env_needs_no_docker(tmp_path):
    settings = StandaloneSettings(
        env="simple_env", steps=2, batch_size=4, rollouts_per_example=2, policy="noisy", output_dir=str(tmp_path)
    )
    seen = []
    summary = await run_standalone(settings, on_step=seen.append)
    assert [s["step"] for s in seen] == [1, 2]  # 1-based, as the console counts
    assert summary["rollouts"] == 8 and summary["masked"] == 0
    on_disk = json.loads((tmp_path / "summary.json").read_text())
    assert on_disk["steps"] == summary["steps"]
    lines = (tmp_path / "steps.jsonl").read_text().splitlines()
    assert [json.loads(line)["step"] for line in lines] == [1, 2]
    assert all(math.isfinite(s["reward_mean"]) for s in summary["steps"])


def test_standalone_bad_settings_are_one_line_errors(capsys):
    assert main(["standalone", "--batch-size", "6", "--rollouts-per-example", "4"]) == 1
    assert "divisible" in capsys.readouterr().err
    assert main(["standalone", "--env", "simple_env", "--env-arg", "num_exampels=3", "--steps", "1"]) == 1
    assert "num_exampels" in capsys.readouterr().err
    assert main(["standalone", "--policy", "clever", "--env", "simple_env", "--steps", "1"]) == 1
    assert "clever" in capsys.readouterr().err


@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.xdist_group("recorded_run")
def test_air_standalone_runs_steps_on_a_builtin_task(recorded_run):
    out = recorded_run  # laneMerge, noisy, 2 steps of 4 rollouts in groups of 2 (tests/runs/conftest.py)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["rollouts"] == 8 and summary["masked"] == 0
    records = [load_trajectory(p) for p in iter_trajectory_paths(out / "trajectories")]
    assert len(records) == 8
    assert sorted({r.step for r in records}) == [1, 2]
    assert {r.policy for r in records} == {"noisy"}
    assert len({r.group_id for r in records}) == 4
    rewards = [s["reward_mean"] for s in summary["steps"]]
    assert all(math.isfinite(r) for r in rewards)
    # The env names its raw scores per task (laneMerge/final_score); the step statistics still find them.
    finals = [r.metrics["final_score"] for r in records if r.step == 1]
    assert summary["steps"][0]["final_score_mean"] == pytest.approx(sum(finals) / len(finals))


def test_python_dash_m_entry_point_works():
    result = subprocess.run(
        [sys.executable, "-m", "air.run_training", "standalone", "--help"],
        capture_output=True,
        text=True,
        timeout=backstop(120),
    )
    assert result.returncode == 0 and "--rollouts-per-example" in result.stdout


# ------------------------------------------------------------------------------------- replay


def test_score_tolerance():
    assert scores_match(1.0, 1.0, 1e-4) and scores_match(None, None, 1e-4)
    assert not scores_match(1.0, None, 1e-4) and not scores_match(1.0, 1.1, 0.02)
    assert scores_match(1.0, 1.01, 0.02)


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_replaying_our_trajectory_reproduces_its_scores(tmp_path, docker_image):
    import air_mlgym
    from tests.env.test_mlgym_env import BETTER_STRATEGY
    from tests.rollouts import run_group

    os.environ["AIR_IMAGE"] = docker_image
    env = air_mlgym.load_environment(
        task_configs=["laneMerge"], max_turns=4, trajectory_dir=str(tmp_path / "rec"), pool_size=0
    )
    from air.policies.scripted import ScriptPolicy

    await run_group(env, ScriptPolicy(["validate", BETTER_STRATEGY, "validate", "submit"]), "laneMerge")
    (recorded,) = iter_trajectory_paths(tmp_path / "rec")
    comparison = await replay_trajectory(recorded, save_dir=tmp_path / "replay")
    assert comparison["reproduced"], _why_not_reproduced(comparison, recorded)
    assert len(comparison["recorded"]) == 3 and comparison["recorded"][0] < comparison["recorded"][1]
    assert comparison["replayed"] == pytest.approx(comparison["recorded"], abs=1e-9)
    assert load_trajectory(comparison["replay_trajectory"]).turns[1].command == BETTER_STRATEGY


def _mlgym_run_folder(root: Path) -> Path:
    """A run folder in MLGym's format, written here: validate the sample, write a better file, submit."""
    better = "cat > submission.csv << 'EOF'\nPassengerId,Survived\n" + "".join(
        f"{100 + i},{i % 2}\n" for i in range(1, 21)
    )
    better += "EOF\n"
    steps = [
        ("ls data\n", "ground_truth.csv\ntest.csv\ntrain.csv\n"),
        ("python baseline.py && validate\n", "Evaluation Score: {'accuracy': 0.5}"),
        (better, ""),
        ("submit\n", ""),
    ]
    traj = {
        "environment": "mlgym_main",
        "trajectory": [
            {"action": a, "observation": o, "response": f"I will run:\n```\n{a}```", "thought": "t", "state": "{}"}
            | {"execution_time": 0.1}
            for a, o in steps
        ],
        "history": [],
        "info": {"exit_status": "submitted", "score": [{"accuracy": 0.5}, {"accuracy": 1.0}], "model_stats": {}},
    }
    folder = root / "made-up-model__titanicSurvival__default__t-0.00__p-0.95__c-4.00__install-0_run_0"
    folder.mkdir(parents=True)
    (folder / "titanicSurvival.traj").write_text(json.dumps(traj))
    (folder / "results.json").write_text(
        json.dumps({"agent": [{"accuracy": 0.5}, {"accuracy": 1.0}], "baseline": {"accuracy": 0.5}})
    )
    return folder


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_replaying_an_mlgym_run_on_its_task_root(tmp_path, docker_image, monkeypatch):
    root = write_mlgym_like_root(tmp_path / "mlgym")
    monkeypatch.setenv("AIR_IMAGE", docker_image)
    folder = _mlgym_run_folder(tmp_path / "runs")
    comparison = await replay_trajectory(folder, task_root=str(root))
    assert comparison["source"] == "mlgym" and comparison["task"] == "titanicSurvival"
    assert comparison["recorded"] == [0.5, 1.0]
    assert comparison["replayed"] == [0.5, 1.0], comparison
    assert comparison["reproduced"]


def test_replay_of_a_missing_file_is_a_clean_error(tmp_path, capsys):
    assert main(["replay", str(tmp_path / "nope.json")]) == 1
    assert "nope.json" in capsys.readouterr().err


def _why_not_reproduced(comparison: dict, recorded: Path) -> str:
    """Both runs' scores and every evaluation that did not score ok (the dict alone is cut short in a report)."""
    lines = [f"recorded {comparison['recorded']} replayed {comparison['replayed']} matches {comparison['matches']}"]
    for label, path in (("recording", recorded), ("replay", comparison["replay_trajectory"])):
        for turn in load_trajectory(path).turns:
            if turn.evaluation is not None and turn.evaluation.status != "ok":
                lines.append(f"{label} turn {turn.index}: {turn.evaluation.status}: {turn.evaluation.error}")
    return "\n".join(lines + [f"notes: {comparison['notes']}"])
