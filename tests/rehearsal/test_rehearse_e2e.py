"""Opt-in: ``air rehearse`` with prime-rl's real orchestrator (AIR_TEST_PRIME_RL_DIR or PRIME_RL_DIR, a
checkout installed by ``install_prime_rl.sh --orchestrator-only``), real containers, the built-in tasks.

The figures it prints are checked against the trajectories the env wrote: every rollout the orchestrator
handed the trainer is found among them by its model turns, with the same reward, one sample per model turn,
and advantages equal to the reward minus its group's mean."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from air.cli.main import main
from air.env.trajectory_reader import iter_trajectory_paths
from air.rehearsal.classic.batches import read_batch, split_rollouts
from tests.conftest import unavailable
from tests.opt_in import prime_rl_checkout

CONFIG = """
inference_gpu_ids = [0]
trainer_gpu_ids = [1]
max_steps = 50
seq_len = 4096
max_async_level = 1

[model]
name = "Qwen/Qwen3-4B-Instruct-2507"

[trainer.model.lora]
rank = 8
alpha = 16

[orchestrator]
batch_size = 4
rollouts_per_example = 2
trajectory_strategy = "branching"

[orchestrator.sampling]
temperature = 1.0
max_tokens = 256

[[orchestrator.env]]
id = "air_mlgym"
name = "lane"
args = {{ task_root = "builtin", task_configs = ["laneMerge"], max_turns = 4, pool_size = 0, image = "{image}" }}

[[orchestrator.env]]
id = "air_mlgym"
name = "loan"
args = {{ task_root = "builtin", task_configs = ["loanDefault"], max_turns = 4, pool_size = 0, image = "{image}" }}

[wandb]
project = "never-contacted"
"""


@pytest.fixture
def checkout() -> Path:
    found = prime_rl_checkout()
    if found is None:
        unavailable(
            "the rehearsal against c87c19b",
            "no prime-rl checkout: set AIR_TEST_PRIME_RL_DIR (install_prime_rl.sh --orchestrator-only)",
        )
    return found


@pytest.mark.timeout(1500)
def test_rehearse_hands_the_trainer_what_the_env_recorded(checkout, tmp_path, docker_image, tiny_model_dir, capsys):
    config = tmp_path / "rl.toml"
    config.write_text(CONFIG.format(image=docker_image))
    out = tmp_path / "rehearsal"
    argv = ["rehearse", "--config", str(config), "--steps", "3", "--prime-rl", str(checkout)]
    status = main([*argv, "--output", str(out), "--model", str(tiny_model_dir), "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert status == 0, report["problems"]
    assert report["steps_completed"] == 3 and report["masked"] == 0 and report["samples"] > 0
    assert report["advantage_nonzero_share"] > 0 and report["loss_mask_ok"] and report["advantages_match_rewards"]
    assert report["dropped"] == ["wandb"] and report["weight_updates"] >= 2  # LoRA loads after steps 1 and 2
    assert {"metrics/mlgym_reward", "metrics/format_errors"} <= set(report["env_metrics"])

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    recorded = [json.loads(p.read_text()) for p in iter_trajectory_paths(out / "trajectories")]
    by_turns: dict[tuple[str, ...], list[dict]] = {}
    for record in recorded:
        by_turns.setdefault(tuple(t["model_text"] for t in record["turns"] if t["model_text"]), []).append(record)
    eos = tokenizer.convert_tokens_to_ids("<|im_end|>")
    matched_rewards = []
    for step in range(3):
        _, samples = read_batch(out / "run_default" / "rollouts" / f"step_{step}" / "rollouts.bin")
        rollouts = split_rollouts(samples, "branching")
        errors = [r["error"] for r in recorded if r.get("error")]
        assert len(rollouts) == 4, f"step {step}: {len(rollouts)} of 4 rollouts reached the batch; errors: {errors}"
        for group in (rollouts[:2], rollouts[2:]):
            mean = sum(r.reward for r in group) / 2
            for rollout in group:
                # the batch stores float32: 1e-6 relative fails a small advantage by rounding alone
                assert rollout.advantage == pytest.approx(rollout.reward - mean, rel=1e-5, abs=1e-6)
                texts = tuple(tokenizer.decode([t for t in s.completion_ids if t != eos]) for s in rollout.samples)
                matches = by_turns.get(texts)
                assert matches, f"step {step}: a rollout the trainer got is in no trajectory: {texts[:1]}"
                assert rollout.reward == pytest.approx(matches[0]["reward"])
                assert len(rollout.samples) == len(texts)  # one sample per model turn
                matched_rewards.append(matches[0]["reward"])
    assert len(matched_rewards) == 12 and report["rollouts"] == 12
    assert report["reward_mean"] == pytest.approx(sum(matched_rewards) / 12)
