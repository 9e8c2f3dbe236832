"""air replay: a recording's evaluation seed reproduces a sampling evaluator's scores exactly; identical
rollouts of a group score identically; a published run that ended without a command is replayed as MLGym
scored it; the checkout's differences from a run are named; clean one-line errors; --image."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from openai import AsyncOpenAI

from air.cli.main import build_parser, main
from air.env.trajectories import BaselineInfo, TrajectoryRecord, Turn
from air.policies.scripted import ScriptPolicy
from air.runs.replay import choose_image, replay_trajectory
from air.runs.replay_checkout import checkout_differences
from air.serving.server import PolicyServer
from tests.rollouts import make_env, trajectories
from tests.sampling_task import TASK, write_sampling_root

RUN_NAME = "made-up-model__{task}__default__t-0.00__p-0.95__c-4.00__install-0_run_0"


def _mlgym_run(root: Path, task: str, steps: list[tuple[str, str]], exit_status: str, scores: list[dict]) -> Path:
    """A run folder in MLGym's format, written here."""
    traj = {
        "environment": "mlgym_main",
        "trajectory": [{"action": a, "observation": o, "response": a, "thought": ""} for a, o in steps],
        "history": [],
        "info": {"exit_status": exit_status, "score": scores, "model_stats": {}},
    }
    folder = root / RUN_NAME.format(task=task)
    folder.mkdir(parents=True)
    (folder / f"{task}.traj").write_text(json.dumps(traj))
    return folder


# --- without Docker ------------------------------------------------------------------------------


def test_an_mlgym_run_without_its_task_root_is_one_line_naming_the_option(tmp_path, capsys) -> None:
    folder = _mlgym_run(tmp_path, "battleOfSexes", [("ls", "")], "submitted", [{"Score": 1.0}])
    assert main(["replay", str(folder)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert "Unknown task 'battleOfSexes'" in err and "--task-root" in err and "Traceback" not in err


def test_a_run_with_nothing_to_replay_is_refused(tmp_path, capsys) -> None:
    folder = _mlgym_run(tmp_path, "battleOfSexes", [("exit_format", "")], "unknown_error", [])
    assert main(["replay", str(folder)]) == 1
    assert "no command and no score" in capsys.readouterr().err


def test_replay_describes_itself_and_takes_an_image() -> None:
    parser = build_parser()
    args = parser.parse_args(["replay", "run.json", "--image", "mine:1"])
    assert args.image == "mine:1"
    [sub] = [a for a in parser._actions if hasattr(a, "choices") and a.choices and "replay" in a.choices]
    assert "evaluation" in (sub.choices["replay"].description or "")


def _record(turns: list[tuple[str, str]]) -> TrajectoryRecord:
    return TrajectoryRecord(
        source="mlgym",
        id="abc",
        task="game",
        started_at="2025-01-01T00:00:00Z",
        exit_status="submitted",
        baseline=BaselineInfo(metric="Score", score=1.0),
        turns=[Turn(index=i, model_text="", command=c, output=o) for i, (c, o) in enumerate(turns, 1)],
    )


def test_the_files_a_run_showed_are_compared_with_the_checkout(tmp_path) -> None:
    files = {}
    checkout = [
        ("strategy.py", "a\nb\n"),
        ("target.py", "x" * 50),
        ("data/n.csv", "1\n"),
        ("data/o.txt", "z"),
        ("new.py", ""),
    ]
    for rel, text in checkout:
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        files[rel] = path
    listing = (
        "total 12\n"
        "drwxr-xr-x 2 agent mlgym 4096 Nov 23 15:30 ./\n"
        "-rw-rw-r-- 1 agent mlgym    4 Nov 21 15:37 strategy.py\n"
        "-rw-rw-r-- 1 agent mlgym   40 Nov 21 15:37 target.py\n"
        "-r-xr-xr-x 1 agent mlgym  999 Nov 21 15:37 evaluate.py*\n"
        "drwxr-xr-x 2 agent mlgym 4096 Nov 21 15:37 data/\n"
    )
    record = _record(
        [
            ("ls -la", listing),
            ('open "data/o.txt"', "[File: /home/agent/workspace/data/o.txt (3 lines total)]\n1:a"),
            ("ls -l data", "-rw-r--r-- 1 agent mlgym 2 Nov 21 15:37 n.csv\n"),  # the same: not named
            ("cat > strategy.py << 'EOF'\nz\nEOF", ""),
            ('open "target.py"', "[File: /home/agent/workspace/target.py (9 lines total)]"),  # after a change
        ]
    )
    assert checkout_differences(record, files, hidden=set()) == [
        "evaluate.py (in the run's workspace, not in this checkout)",
        "target.py (40 B in the run, 50 B here)",
        "data/o.txt (3 lines in the run, 1 here)",
        "new.py (in this checkout, not in the run's workspace)",
    ]
    assert "new.py" not in " ".join(checkout_differences(record, files, hidden={"new.py"}))  # a secret: unseen
    assert checkout_differences(_record([("ls", "target.py")]), files, hidden=set()) == []  # no sizes shown


# --- with Docker ---------------------------------------------------------------------------------


async def _group(env, group_id: str, commands: list[str], n: int = 2) -> list[dict]:
    row = env.get_dataset().to_list()[0]
    row = {**row, "info": {**row["info"], "group_id": group_id}}
    with PolicyServer(ScriptPolicy(commands)) as server:
        client = AsyncOpenAI(base_url=server.base_url, api_key="test", max_retries=0)
        try:
            outputs = await env.run_group([row] * n, client, server.model_name, {"temperature": 1.0})
        finally:
            await client.close()
    return [dict(o) for o in outputs]


@pytest.mark.docker
@pytest.mark.timeout(600)
async def test_a_group_shares_one_seed_and_replay_reproduces_it_exactly(tmp_path, docker_image) -> None:
    root = write_sampling_root(tmp_path / "root")
    env = make_env(tmp_path, docker_image, task_configs=[TASK], task_root=str(root), max_turns=3)
    first = await _group(env, "1-0", ["validate", "submit"])
    second = await _group(env, "1-1", ["validate", "submit"])
    assert not any(o.get("error") for o in first + second)
    by_group: dict[str, list[TrajectoryRecord]] = {}
    for record in trajectories(tmp_path):
        by_group.setdefault(record.group_id or "", []).append(record)
    a, b = by_group["1-0"], by_group["1-1"]
    scores = {
        g: [[e.score for e in (r.turns[0].evaluation, r.final_evaluation)] for r in rs] for g, rs in by_group.items()
    }
    assert scores["1-0"][0] == scores["1-0"][1] and scores["1-1"][0] == scores["1-1"][1], scores  # no noise in a group
    assert scores["1-0"][0] != scores["1-1"][0]  # another group, another seed
    assert a[0].evaluation_seed == a[1].evaluation_seed != b[0].evaluation_seed
    assert [o["reward"] for o in first][0] == [o["reward"] for o in first][1]

    recorded = next(
        p for p in (tmp_path / "trajectories").rglob("*.json") if json.loads(p.read_text())["group_id"] == "1-0"
    )
    comparison = await replay_trajectory(recorded, image=docker_image)
    assert comparison["replayed"] == comparison["recorded"] == scores["1-0"][0]  # exactly
    assert comparison["reproduced"] and comparison["tolerance"] == 1e-4
    assert comparison["evaluation_seed"] == a[0].evaluation_seed and comparison["notes"] == []


@pytest.mark.docker
@pytest.mark.timeout(300)
async def test_a_published_run_that_ended_without_a_command_is_replayed(tmp_path, docker_image) -> None:
    root = write_sampling_root(tmp_path / "root")
    steps = [("exit_format", "Exited (autosubmission)")]
    folder = _mlgym_run(tmp_path / "runs", TASK, steps, "autosubmission (exit_format)", [{"Score": 1.025}])
    comparison = await replay_trajectory(folder, task_root=str(root), image=docker_image)
    assert comparison["commands"] == 0 and comparison["recorded"] == [1.025]
    assert comparison["reproduced"], comparison  # within 2%: MLGym recorded no seed
    assert comparison["tolerance"] == 0.02
    assert any("without a command" in n for n in comparison["notes"])
    assert any("without an evaluation seed" in n for n in comparison["notes"])


@pytest.mark.docker
def test_the_recorded_image_is_used_when_present_else_the_default_saying_so(docker_image) -> None:
    assert choose_image(None, docker_image) == (docker_image, None)
    assert choose_image("mine:1", docker_image) == ("mine:1", None)
    assert choose_image(None, None) == (None, None)
    image, note = choose_image(None, "air-test-no-such-image:0")
    assert image is None and note is not None and "air-test-no-such-image:0 is not on this machine" in note
