"""The rehearsal's new figures on planted data: branch points by cause, episodes cancelled, and the report."""

from __future__ import annotations

import json
from pathlib import Path

from air.rehearsal.launch import read_episodes
from air.rehearsal.report import RehearsalReport
from air.rehearsal.v1.branches import branch_causes
from air.rehearsal.v1.generation import cancellations_logged

MERGED = {1000: "hi"}  # a token the tokenizer merged: decodes to the same text as "h" + "i"


def decode(ids: list[int]) -> str:
    return "".join(MERGED.get(i, chr(i)) for i in ids)


def ids(text: str) -> list[int]:
    return [ord(c) for c in text]


def node(parent, role, content, text, sampled=False, reasoning=None) -> dict:
    message = {"role": role, "content": content}
    if reasoning is not None:
        message["reasoning_content"] = reasoning
    tokens = text if isinstance(text, list) else ids(text)
    return {"parent": parent, "message": message, "sampled": sampled, "token_ids": tokens}


def trace_with_fork(sampled: dict, rendered: dict) -> list[dict]:
    """system, user, the sampled reply, then the next prompt: the reply as rendered (a sibling) + a user turn."""
    return [
        node(None, "system", "sys", "<s>sys"),
        node(0, "user", "task", "<u>task"),
        {**sampled, "parent": 1},
        {**rendered, "parent": 1},
        node(3, "user", "obs", "<u>obs"),
    ]


def test_a_linear_trace_has_no_branch_point() -> None:
    nodes = [node(None, "user", "task", "<u>task"), node(0, "assistant", "hi", "<a>hi", sampled=True)]
    assert branch_causes(nodes, decode) == {}


def test_reasoning_the_template_drops_is_named() -> None:
    sampled = node(None, "assistant", "\n\nhi", "<a><think>\nmull\n</think>\n\nhi", True, reasoning="\nmull\n")
    rendered = node(None, "assistant", "\n\nhi", "<a>\n\nhi", reasoning="\nmull\n")
    assert branch_causes(trace_with_fork(sampled, rendered), decode) == {"reasoning_not_rendered": 1}


def test_the_same_text_in_other_tokens_is_retokenized() -> None:
    sampled = node(None, "assistant", "hi", ids("<a>") + [1000], True)
    rendered = node(None, "assistant", "hi", "<a>hi<e>")
    assert branch_causes(trace_with_fork(sampled, rendered), decode) == {"retokenized": 1}


def test_a_rewritten_message_and_a_template_that_changes_text_are_told_apart() -> None:
    sampled = node(None, "assistant", "hi ", "<a>hi ", True)
    assert branch_causes(trace_with_fork(sampled, node(None, "assistant", "hey", "<a>hey")), decode) == {
        "message_changed": 1
    }
    stripped = node(None, "assistant", "hi ", "<a>hi<e>")  # the template strips the reply's whitespace
    assert branch_causes(trace_with_fork(sampled, stripped), decode) == {"template_text": 1}


def test_two_sampled_replies_to_one_prompt_are_a_resample() -> None:
    first = node(None, "assistant", "hi", "<a>hi", True)
    again = node(None, "assistant", "ho", "<a>ho", True)
    assert branch_causes(trace_with_fork(first, again), decode) == {"resampled": 1}


def test_episodes_are_counted_from_their_trajectories(tmp_path: Path) -> None:
    folder = tmp_path / "trajectories" / "laneMerge"
    folder.mkdir(parents=True)
    for index, status in enumerate(["submitted", "cancelled", "max_turns", "cancelled", "error"]):
        (folder / f"{index}.json").write_text(json.dumps({"exit_status": status}))
    (folder / "broken.json").write_text("{not json")
    found, nowhere = read_episodes(tmp_path / "trajectories"), read_episodes(tmp_path / "nowhere")
    assert (found.dispatched, found.cancelled) == (5, 2)
    assert (nowhere.dispatched, nowhere.cancelled) == (0, 0)


def test_prime_rls_cancellations_are_read_from_its_log() -> None:
    log = (
        "19:36:45 WARNING Cancelled 14 train episodes past max_off_policy_steps=1. Consider increasing it\n"
        "19:37:01 WARNING Cancelled 3 train episodes past max_off_policy_steps=1. Consider increasing it\n"
        "19:37:11    INFO Shipped the final batch — draining pipeline (cancelled 24 in-flight train episode(s); any"
    )
    assert cancellations_logged(log) == (17, 24)
    assert cancellations_logged("INFO Starting orchestrator loop") == (None, None)


def _report(**figures) -> RehearsalReport:
    base = dict(
        config="c.toml", output_dir="/o", steps_requested=3, steps_completed=3, rollouts=48, masked=0, samples=48,
        reward_mean=0.1, advantage_nonzero_share=1.0, zero_advantage_groups=0, loss_mask_ok=True,
        samples_per_rollout=1.0, seconds_per_step=50.0, trajectory_strategy="branches (v1 traces)", groups=12,
        masked_samples=0, advantages_match_rewards=True, rollouts_without_samples=0, loss_tokens=100, weight_updates=3,
    )  # fmt: skip
    return RehearsalReport(**{**base, **figures})


def test_the_report_carries_the_cancelled_share_and_warns_past_a_tenth() -> None:
    fine = _report(dispatched=52, cancelled=4, branch_points={"retokenized": 1}, branches_per_rollout=1.02)
    figures = json.loads(json.dumps(fine.as_dict()))
    assert figures["cancelled"] == 4 and figures["cancelled_share"] == 4 / 52
    assert figures["branch_points"] == {"retokenized": 1} and figures["branches_per_rollout"] == 1.02
    assert not any("cancelled" in w for w in fine.warnings())
    wasteful = _report(dispatched=82, cancelled=26, generation="v1")
    (warning,) = [w for w in wasteful.warnings() if "cancelled" in w]
    assert "26 of 82" in warning and "max_inflight" in warning and "max_off_policy_steps" in warning
    assert wasteful.problems() == [], "thrown-away work is a warning: the batches still teach"


def test_seconds_per_step_count_from_the_first_rollout_and_start_up_apart(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from air.rehearsal.report import step_timing

    launched = 1_000_000.0
    folder = tmp_path / "trajectories" / "laneMerge"
    folder.mkdir(parents=True)
    for index, began in enumerate((launched + 30, launched + 31, launched + 45)):
        started_at = datetime.fromtimestamp(began, UTC).isoformat()
        (folder / f"{index}.json").write_text(json.dumps({"started_at": started_at, "exit_status": "submitted"}))
    trainer = [{"step": i, "received_at": t} for i, t in enumerate([launched + 50, launched + 65, launched + 90])]
    first_started = read_episodes(tmp_path / "trajectories").first_started
    timing = step_timing(first_started, trainer, launched, elapsed=100.0, steps=3)
    assert timing == {"seconds_per_step": 20.0, "startup_s": 30.0, "wall_s": 100.0}
    # nothing to time by: the whole wall time per step, no start-up figure
    assert step_timing(read_episodes(tmp_path / "empty").first_started, [], launched, 100.0, 3) == {
        "seconds_per_step": 100 / 3,
        "startup_s": None,
        "wall_s": 100.0,
    }


def test_the_classic_generation_is_not_told_of_v1_knobs() -> None:
    (warning,) = [w for w in _report(dispatched=62, cancelled=10).warnings() if "cancelled" in w]
    assert "10 of 62" in warning and "max_inflight" not in warning and "when it stops" in warning
