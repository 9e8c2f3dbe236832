"""An MLGym run folder (``<model>__<task>__..._run_<n>/`` with ``<task>.traj`` and ``results.json``), written
from scratch in the structure MLGym documents, for the trajectory reader's and the viewer's tests."""

from __future__ import annotations

import json
from pathlib import Path

RUN_NAME = "acme-tiny-7b__mazeRunner__plain__t-0.70__p-0.90__c-2.50__install-0__nightly_run_3"


def mlgym_step(action: str, observation: str, seconds: float = 0.5) -> dict:
    reply = f"Next I will run this.\n```\n{action.rstrip()}\n```"
    return {
        "action": action,
        "observation": observation,
        "response": reply,
        "state": json.dumps({"open_file": "n/a", "working_dir": "/home/agent/workspace"}),
        "thought": "Next I will run this.",
        "execution_time": seconds,
    }


def mlgym_scored(metrics: dict) -> str:
    return f"Submission is valid.\nBaseline Score: {{'steps': 40.0, 'solved': 0.5}}\nEvaluation Score: {metrics!r}"


def write_mlgym_run(
    parent: Path,
    *,
    steps: list[dict] | None = None,
    exit_status: str = "submitted",
    scores: list[dict] | None = None,
    baseline: dict | None = None,
    name: str = RUN_NAME,
    task: str = "mazeRunner",
) -> Path:
    folder = parent / name
    folder.mkdir(parents=True)
    if steps is None:
        steps = [
            mlgym_step("ls\n", "maze.py\nsolver.py"),
            mlgym_step('open "solver.py"\n', "[File: solver.py (3 lines total)]\n1:def solve(m):\n2:    return []"),
            mlgym_step(
                "python solver.py\n",
                "partial output\nEXECUTION TIMED OUT after 9 s",
                9.0,
            ),
            mlgym_step("validate\n", mlgym_scored({"steps": 35.0, "solved": 0.6})),
            mlgym_step("python solver.py && validate\n", mlgym_scored({"steps": 31.0, "solved": 0.7})),
            mlgym_step("validate\n", "Failed to decode metrics from the evaluation script. Output:\n---\noops\n---"),
            mlgym_step("submit\n", ""),
        ]
    if scores is None:
        scores = [{"steps": 35.0, "solved": 0.6}, {"steps": 31.0, "solved": 0.7}, {"steps": 30.0, "solved": 0.7}]
    history = [
        {"role": "system", "content": "You solve mazes in a shell.", "agent": "primary"},
        {"role": "user", "content": "Make solver.py find shorter paths.", "agent": "primary"},
    ]
    for step in steps:
        history.append({"role": "assistant", "content": step["response"], "agent": "primary", "thought": "t"})
        history.append({"role": "user", "content": step["observation"], "agent": "primary"})
    traj = {
        "environment": "maze_env",
        "trajectory": steps,
        "history": history,
        "info": {
            "model_stats": {"total_cost": 0.12, "tokens_sent": 1000, "tokens_received": 50, "api_calls": len(steps)},
            "exit_status": exit_status,
            "submission": "/home/agent/workspace/solver.py",
            "score": scores,
            "summarizer": {},
        },
    }
    (folder / f"{task}.traj").write_text(json.dumps(traj, indent=2))
    results = {"agent": scores, "baseline": {"steps": 40.0, "solved": 0.5} if baseline is None else baseline}
    (folder / "results.json").write_text(json.dumps(results, indent=2))
    return folder
