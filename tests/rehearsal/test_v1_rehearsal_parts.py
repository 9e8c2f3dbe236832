"""The v1 rehearsal's own parts, without prime-rl: reading today's batches and episodes, the checks made
on them, and the config the rehearsal derives (external env servers included)."""

from __future__ import annotations

import json
import socket
from pathlib import Path

import msgpack
import pytest

from air.rehearsal.errors import RehearsalError
from air.rehearsal.figures import BatchFormatError
from air.rehearsal.v1.batches import branches_of, read_micro_batches, read_traces, v1_figures
from air.rehearsal.v1.plan import check_external_servers, free_port_block, plan_v1, rehearsal_config

PROMPT = [10, 11, 12]
MARK = 99  # stands for <|im_start|>: an env turn's first token


def node(tokens, sampled, parent=None):
    return {"parent": parent, "token_ids": tokens, "mask": [sampled] * len(tokens), "sampled": sampled}


def episode(group, reward, reply, source="lane", ok=True):
    nodes = [node(PROMPT, False), node(reply, True, 0), node([MARK, 5], False, 1), node([7, 8], True, 2)]
    trace = {"nodes": nodes, "rewards": {"mlgym_reward": {"score": reward, "weight": 1.0}}, "ok": ok}
    return {"env": {"name": source}, "group": {"id": group}, "ok": ok, "traces": [trace]}


def tokens_of(reply):
    return PROMPT + reply + [MARK, 5, 7, 8]


def mask_of(reply):
    return [False] * 3 + [True] * len(reply) + [False, False, True, True]


def micro_batch(samples):
    """A positional MicroBatch as msgspec writes it (array_like, defaults omitted)."""
    ids, mask, adv, lengths, names = [], [], [], [], []
    for tokens, loss_mask, advantage, name in samples:
        ids += tokens
        mask += loss_mask
        adv += [advantage if m else 0.0 for m in loss_mask]
        lengths.append(len(tokens))
        names += [name] * len(tokens)
    zeros = [0.0] * len(ids)
    return [ids, mask, adv, zeros, list(range(len(ids))), lengths, [1.0] * len(ids), names, lengths]


def write_step(folder: Path, step: int, episodes, samples) -> None:
    step_dir = folder / f"step_{step}"
    (step_dir / "train" / "all").mkdir(parents=True)
    (step_dir / "train" / "all" / "traces.jsonl").write_text("".join(json.dumps(e) + "\n" for e in episodes))
    (step_dir / "rank_0.bin").write_bytes(msgpack.packb([micro_batch(samples)]))


def read_step(folder: Path, step: int):
    step_dir = folder / f"step_{step}"
    return read_micro_batches(step_dir / "rank_0.bin", step), read_traces(step_dir / "train/all/traces.jsonl", step)


def test_batches_match_their_episodes_and_advantages_follow_grpo(tmp_path):
    a, b = [1, 2], [3, 4, 4]
    episodes = [episode("g1", 1.0, a), episode("g1", 0.0, b), episode("g2", 0.5, [6], source="loan")]
    episodes.append(episode("g2", 0.5, [6, 6], source="loan"))
    samples = [
        (tokens_of(a), mask_of(a), 0.5, "lane"),
        (tokens_of(b), mask_of(b), -0.5, "lane"),
    ]  # g2's rewards are equal: prime-rl filters zero advantages, so nothing of it ships
    write_step(tmp_path, 1, episodes, samples)
    batch, traces = read_step(tmp_path, 1)
    figures = v1_figures(batch, traces, {MARK})
    assert (figures.steps, figures.samples, figures.rollouts, figures.groups) == (1, 2, 4, 2)
    assert figures.loss_mask_ok and figures.advantages_match_rewards, figures.loss_mask_problems
    assert figures.zero_advantage_groups == 1 and figures.masked == 0 and figures.advantage_nonzero_share == 1.0
    assert figures.by_source == {"lane": {"rollouts": 2, "samples": 2}, "loan": {"rollouts": 2, "samples": 0}}
    assert figures.loss_tokens == sum(sum(mask_of(r)) for r in (a, b))
    assert figures.reward_mean == pytest.approx(0.5)


def test_a_wrong_advantage_an_env_token_under_the_mask_and_a_stray_sample_are_found(tmp_path):
    a, b = [1, 2], [3, 4]
    episodes = [episode("g1", 1.0, a), episode("g1", 0.0, b)]
    leaky = mask_of(b)
    leaky[len(PROMPT) + len(b)] = True  # the env turn's marker
    samples = [(tokens_of(a), mask_of(a), 0.25, "lane"), (tokens_of(b), leaky, -0.5, "lane")]
    samples.append(([42, 43], [False, True], 1.0, "lane"))
    write_step(tmp_path, 1, episodes, samples)
    figures = v1_figures(*read_step(tmp_path, 1), {MARK})
    assert not figures.advantages_match_rewards
    assert not figures.loss_mask_ok
    problems = " | ".join(figures.loss_mask_problems)
    assert "differs from the trace's sampled tokens" in problems
    assert "chat-template markers" in problems and "matches no trace's tokens" in problems


def test_errored_traces_are_left_out_of_the_group_mean_and_counted_as_masked(tmp_path):
    a, b = [1, 2], [3, 4]
    episodes = [episode("g1", 1.0, a), episode("g1", 0.0, b), episode("g1", 0.0, [5], ok=False)]
    samples = [(tokens_of(a), mask_of(a), 0.5, "lane"), (tokens_of(b), mask_of(b), -0.5, "lane")]
    write_step(tmp_path, 1, episodes, samples)
    figures = v1_figures(*read_step(tmp_path, 1), {MARK})
    assert figures.advantages_match_rewards and figures.masked == 1 and figures.rollouts == 3


def test_a_shared_sampled_node_trains_in_its_first_branch_only():
    nodes = [node([1], False), node([2, 3], True, 0), node([4], False, 1), node([5], False, 1)]
    assert branches_of(nodes) == [([1, 2, 3, 4], [False, True, True, False]), ([1, 2, 3, 5], [False] * 4)]


def test_files_that_are_not_prime_rl_mains_layout_are_named(tmp_path):
    bad = tmp_path / "rank_0.bin"
    bad.write_bytes(msgpack.packb([[1, 2, 3]]))
    with pytest.raises(BatchFormatError, match="not a positional MicroBatch"):
        read_micro_batches(bad, 1)
    traces = tmp_path / "traces.jsonl"
    traces.write_text('{"env": {}}\n')
    with pytest.raises(BatchFormatError, match="traces.jsonl:1"):
        read_traces(traces, 1)


RL = """
max_steps = 20
[deployment]
num_infer_gpus = 1
num_train_gpus = 1
[model]
name = "Qwen/Qwen3-4B-Instruct-2507"
[orchestrator]
batch_size = 8
group_size = 4
[[orchestrator.train.source]]
name = "lane"
[orchestrator.train.source.env.taskset]
id = "air_mlgym"
task_root = "builtin"
task_configs = ["laneMerge"]
env_gpu = "0"
[[orchestrator.train.source]]
name = "loan"
[orchestrator.train.source.env.taskset]
id = "air_mlgym"
task_root = "builtin"
task_configs = ["loanDefault"]
[orchestrator.eval]
interval = 5
[inference]
[monitors.wandb]
project = "p"
[ckpt]
interval = 10
"""


def plan(raw_text: str = RL, external=None):
    import tomllib

    return plan_v1(Path("rl.toml"), tomllib.loads(raw_text), external)


def test_the_rehearsal_config_changes_only_what_it_must(tmp_path):
    planned = plan(external={"loan": "tcp://10.0.0.7:5000"})
    assert [(s.name, s.address) for s in planned.sources] == [("lane", None), ("loan", "tcp://10.0.0.7:5000")]
    assert planned.dropped[:4] == ["monitors", "ckpt", "inference", "orchestrator.eval"]
    assert "env_gpu of lane" in planned.dropped
    config = rehearsal_config(
        planned,
        steps=3,
        model_dir=tmp_path / "tiny",
        base_url="http://127.0.0.1:9/v1",
        out=tmp_path,
        base_port=30000,
        env_args={"trajectory_dir": "T", "run_id": "R"},
    )
    assert config["max_steps"] == 3 and config["model"]["name"] == str(tmp_path / "tiny")
    assert not {"monitors", "ckpt", "inference"} & config.keys()
    assert config["rollout_transport"] == config["weight_broadcast"] == {"type": "filesystem"}
    orchestrator = config["orchestrator"]
    assert "eval" not in orchestrator and orchestrator["renderer"] == {"name": "default"}
    assert orchestrator["model"]["client"]["base_url"] == "http://127.0.0.1:9/v1"
    assert orchestrator["env_server_base_port"] == 30000 and orchestrator["concurrency"]["initial_inflight"] == 8
    lane, loan = orchestrator["train"]["source"]
    assert lane["env"]["taskset"] == {
        "id": "air_mlgym",
        "task_root": "builtin",
        "task_configs": ["laneMerge"],
        "trajectory_dir": "T",
        "run_id": "R",
    }
    assert loan["serve"] == {"address": "tcp://10.0.0.7:5000"} and "run_id" not in loan["env"]["taskset"]
    assert "serve" not in plan().raw["orchestrator"]["train"]["source"][1]  # the user's config is untouched


def test_an_unknown_external_source_and_a_silent_address_are_refused():
    with pytest.raises(RehearsalError, match="no train source named 'lan'"):
        plan(external={"lan": "tcp://127.0.0.1:5000"})
    port = free_port_block(1)
    with pytest.raises(RehearsalError, match=f"no env server answers at tcp://127.0.0.1:{port}"):
        check_external_servers(plan(external={"loan": f"tcp://127.0.0.1:{port}"}))
    with pytest.raises(RehearsalError, match="is not tcp://HOST:PORT"):
        check_external_servers(plan(external={"loan": "http://x"}))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    try:
        check_external_servers(plan(external={"loan": f"tcp://127.0.0.1:{listener.getsockname()[1]}"}))
    finally:
        listener.close()


def test_a_second_model_algorithm_is_refused():
    with pytest.raises(RehearsalError, match="second model"):
        plan(RL.replace("[orchestrator]\n", '[orchestrator]\nalgo = { type = "opd" }\n'))


def test_free_port_block_gives_consecutive_free_ports():
    start = free_port_block(3)
    for port in range(start, start + 3):
        probe = socket.socket()
        probe.bind(("127.0.0.1", port))
        probe.close()
