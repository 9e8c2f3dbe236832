"""`air standalone --seed`: a seeded run repeats its figures. What a seed fixes (docs/standalone.md): the
evaluation seeds (env.seeds), the order of the examples and the scripted agent's replies, each rollout's
drawn from its own seed (its group and place, never which request reached the server first). What it does
not: times, ids, the folder, and what a command prints of the clock (``ls -la``'s file times)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import openai
import pytest

from air.cli.main import main
from air.env.trajectory_reader import iter_trajectory_paths, load_trajectory
from air.runs.standalone import _step_inputs, rollout_sampling, sampling_seed
from air.runs.standalone_settings import StandaloneSettings
from air.serving.server import PolicyServer
from tests.runs.conftest import recorded_run_argv

# What two runs of one seed may differ in (docs/standalone.md, --seed): times, ids and where the run is.
STEP_TIMES = {"seconds"}
SUMMARY_TIMES_AND_PLACES = {"seconds", "output_dir"}
RECORD_TIMES_AND_IDS = {"id", "started_at", "finished_at", "duration_s"}
CLOCK = re.compile(r"\b[A-Z][a-z]{2} +\d{1,2} +(\d\d:\d\d|\d{4})\b")  # ls -l's file times


def test_a_rollouts_sampling_seed_is_its_place_in_the_run() -> None:
    settings = StandaloneSettings(env="simple_env", batch_size=6, rollouts_per_example=3, seed=7)
    rows = [{"prompt": [], "info": {"task_name": "dial"}}]
    groups = _step_inputs(rows, 0, 2, settings, "noisy")
    infos = [row["info"] for group in groups for row in group]
    assert [(i["group_id"], i["rollout"]) for i in infos] == [(f"2-{g}", r) for g in (0, 1) for r in (0, 1, 2)]
    seeds = [rollout_sampling({"temperature": 1.0}, settings, i, seeded=True)["seed"] for i in infos]
    assert len(set(seeds)) == 6, "each rollout samples from its own seed"
    assert seeds == [sampling_seed(7, i["group_id"], i["rollout"]) for i in infos], "and nothing else"
    assert all(0 <= s < 2**63 for s in seeds)
    assert sampling_seed(8, "2-0", 0) != seeds[0], "another run seed, other replies"
    # Another endpoint's sampling is its own: nothing is added to what the run asks of it.
    assert rollout_sampling({"temperature": 1.0}, settings, infos[0], seeded=False) == {"temperature": 1.0}


def _lane_merge_conversation(clock: str) -> list[dict[str, str]]:
    listing = f"total 8\n-rw-r--r-- 1 agent agent  986 {clock} strategy.py\n[turn 1 of 10 | exit 0]"
    return [
        {"role": "system", "content": "Reply with one command in one fenced bash block."},
        {"role": "user", "content": "# Task: laneMerge\nPlay the row strategy."},
        {"role": "assistant", "content": "Let me look around.\n```bash\nls -la\n```"},
        {"role": "user", "content": listing},
    ]


def test_a_seeded_reply_follows_the_seed_and_the_turn_not_the_clock_or_other_requests() -> None:
    """The scripted agent's seeded replies: the same for a listing made a minute later, and whatever other
    requests the server answered meanwhile (rollouts of one step ask in any order)."""
    early, late = _lane_merge_conversation("Nov 26 23:33"), _lane_merge_conversation("Nov 26 23:34")
    with PolicyServer("noisy", seed=0) as server, openai.OpenAI(base_url=server.base_url, api_key="x") as client:

        def ask(messages: list[dict[str, str]], seed: int | None) -> str:
            return client.chat.completions.create(model="m", messages=messages, seed=seed).choices[0].message.content

        first = [ask(early, seed) for seed in range(12)]
        for _ in range(3):
            ask(late, None)  # unseeded requests draw from the server's generator: no seeded reply may move
        again = [ask(late, seed) for seed in range(12)]
    assert again == first
    assert len(set(first)) > 1, "the seed still decides the reply"


@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.xdist_group("recorded_run")
def test_two_runs_of_one_seed_give_the_same_figures(recorded_run: Path, tmp_path: Path, docker_image: str) -> None:
    """The recorded run (laneMerge, noisy, 2 steps of 4 in groups of 2, seed 0) made again: every figure of
    steps.jsonl and summary.json and every rollout's replies, rewards and advantages repeat; the runs differ
    only in times, ids, the folder and the file times ``ls -la`` prints."""
    again = recorded_run.parent / "again"  # beside the recorded run: its secret (docs/standalone.md)
    assert main([*recorded_run_argv(again), "--env-arg", f"image={docker_image}"]) == 0
    first, second = (_steps(run) for run in (recorded_run, again))
    assert len(first) == 2 and second == first
    assert _summary(again) == _summary(recorded_run)
    first_records, second_records = _records(recorded_run), _records(again)
    assert len(first_records) == 8 and second_records.keys() == first_records.keys()
    for key, record in first_records.items():
        assert second_records[key] == record, f"rollout {key} differs beyond times and ids"


def _steps(run: Path) -> list[dict[str, Any]]:
    lines = (run / "steps.jsonl").read_text().splitlines()
    return [{k: v for k, v in json.loads(line).items() if k not in STEP_TIMES} for line in lines]


def _summary(run: Path) -> dict[str, Any]:
    summary = json.loads((run / "summary.json").read_text())
    summary["settings"].pop("output_dir")
    summary["steps"] = [{k: v for k, v in s.items() if k not in STEP_TIMES} for s in summary["steps"]]
    return {k: v for k, v in summary.items() if k not in SUMMARY_TIMES_AND_PLACES}


def _records(run: Path) -> dict[tuple[str, int], dict[str, Any]]:
    """Each rollout by its group and sampling seed, without its times, ids and paths."""
    records = {}
    for path in iter_trajectory_paths(run / "trajectories"):
        record = load_trajectory(path).model_dump(mode="json")
        key = (record["group_id"], record["sampling_args"]["seed"])
        records[key] = _timeless(record)
    return records


def _timeless(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _timeless(v) for k, v in value.items() if k not in RECORD_TIMES_AND_IDS and k != "trajectory_dir"}
    if isinstance(value, list):
        return [_timeless(v) for v in value]
    return CLOCK.sub("<time>", value) if isinstance(value, str) else value
