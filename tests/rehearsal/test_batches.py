"""Reading back what prime-rl's orchestrator hands its trainer (air/rehearsal/classic/batches.py), on batches
packed here the way msgspec packs prime-rl's TrainingBatch (positional arrays, trailing defaults left
out), and the figures computed from them. The real orchestrator's files are read in the opt-in
end-to-end test (test_rehearse_e2e.py)."""

from __future__ import annotations

from pathlib import Path

import msgpack
import pytest

from air.rehearsal.classic.batches import BatchFormatError, figures, read_batch, split_rollouts

IM_START = 1  # stands for the chat template's turn marker


def sample(prompt, completion, advantage, reward, masked=False, prompt_mask=None):
    """A TrainingSample as msgspec writes it: positional, teacher_logprobs nil, trailing Nones omitted."""
    return [
        prompt,
        prompt_mask or [False] * len(prompt),
        completion,
        [not masked] * len(completion),
        [-1.0] * len(completion),
        [1.0] * len(completion),
        None,
        advantage,
        reward,
    ]


def rollout(first_prompt, turns, reward, advantage):
    """A branching rollout: each turn's prompt is the previous prompt + completion + an env reply."""
    samples, prompt = [], list(first_prompt)
    for turn in range(turns):
        completion = [100 + turn, 101 + turn]
        samples.append(sample(list(prompt), completion, advantage, reward))
        prompt = prompt + completion + [IM_START, 50 + turn, 7]
    return samples


def write(tmp_path: Path, examples, step=0) -> Path:
    path = tmp_path / f"step_{step}" / "rollouts.bin"
    path.parent.mkdir(parents=True)
    path.write_bytes(msgpack.packb([examples, step]))
    return path


def group(rewards, turns, prompt=(IM_START, 5, 6, 7)):
    mean = sum(rewards) / len(rewards)
    return [s for reward, n in zip(rewards, turns, strict=True) for s in rollout(prompt, n, reward, reward - mean)]


def test_branching_samples_are_regrouped_into_rollouts_and_groups(tmp_path):
    examples = group([1.0, 0.0], [3, 1]) + group([0.5, 0.5], [1, 1])
    step, samples = read_batch(write(tmp_path, examples, step=4))
    assert step == 4 and len(samples) == 6
    rollouts = split_rollouts(samples, "branching")
    assert [len(r.samples) for r in rollouts] == [3, 1, 1, 1]  # two one-turn rollouts with equal prompts stay apart
    result = figures([samples], "branching", group_size=2, special_ids={IM_START}, batch_size=4)
    assert (result.rollouts, result.groups, result.samples) == (4, 2, 6)
    assert result.zero_advantage_groups == 1 and result.advantage_nonzero_share == pytest.approx(4 / 6)
    assert result.advantages_match_rewards and result.loss_mask_ok and result.masked == 0
    assert result.reward_mean == pytest.approx((1.0 + 0.0 + 0.5 + 0.5) / 4)
    assert result.samples_per_rollout == pytest.approx(1.5)
    assert result.loss_tokens == 12


def test_interleaved_samples_are_one_rollout_each(tmp_path):
    examples = [sample([IM_START, 5], [9, 9, 9], 0.25, 1.0), sample([IM_START, 5], [8, 8], -0.25, 0.5)]
    _, samples = read_batch(write(tmp_path, examples))
    assert len(split_rollouts(samples, "interleaved")) == 2


def test_the_loss_mask_may_not_cover_prompts_or_env_turns(tmp_path):
    prompt_trained = sample([IM_START, 5], [9], 0.5, 1.0, prompt_mask=[False, True])
    env_trained = sample([IM_START, 5], [9, IM_START, 4], -0.5, 0.0)
    _, samples = read_batch(write(tmp_path, [prompt_trained, env_trained]))
    result = figures([samples], "interleaved", group_size=2, special_ids={IM_START})
    assert not result.loss_mask_ok
    assert any("prompt tokens" in p for p in result.loss_mask_problems)
    assert any("env turn tokens" in p for p in result.loss_mask_problems)


def test_masked_rollouts_and_wrong_advantages_are_counted(tmp_path):
    errored = [sample([IM_START, 5], [9, 9], -0.5, 0.0, masked=True)]
    fine = rollout([IM_START, 5], 2, 1.0, 0.5)
    wrong = rollout([IM_START, 6], 1, 1.0, 0.7) + rollout([IM_START, 6], 1, 0.0, -0.7)  # mean 0.5, not 0.7 away
    _, samples = read_batch(write(tmp_path, errored + fine + wrong))
    result = figures([samples], "branching", group_size=2, special_ids={IM_START}, batch_size=4)
    assert (result.masked, result.masked_samples) == (1, 1)
    assert not result.advantages_match_rewards


def test_a_file_that_is_not_a_training_batch_is_named(tmp_path):
    path = tmp_path / "rollouts.bin"
    path.write_bytes(msgpack.packb({"examples": []}))
    with pytest.raises(BatchFormatError, match="rollouts.bin: expected"):
        read_batch(path)
    path.write_bytes(msgpack.packb([[[1, 2]], 0]))
    with pytest.raises(BatchFormatError, match="example 0"):
        read_batch(path)
    path.write_bytes(b"\xc1 not msgpack")
    with pytest.raises(BatchFormatError, match="not msgpack"):
        read_batch(path)


def test_a_rollout_that_left_no_sample_shortens_its_group_without_shifting_the_others(tmp_path):
    """Rewards 1.0 and 0.0 (mean 0.5), but the 0.0 rollout failed before its first turn: only the
    1.0 rollout (advantage 0.5) reached the batch. The next group must still be recognised."""
    lonely = rollout([IM_START, 5], 2, 1.0, 0.5)
    _, samples = read_batch(write(tmp_path, lonely + group([0.2, 0.6], [1, 2])))
    result = figures([samples], "branching", group_size=2, special_ids={IM_START}, batch_size=4)
    assert (result.groups, result.rollouts_without_samples) == (2, 1)
    assert result.advantages_match_rewards  # the complete group is checked; the short one cannot be
