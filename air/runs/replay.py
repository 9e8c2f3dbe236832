"""Re-run a recorded trajectory (ours, or an MLGym run) in a fresh container and compare scores.

The recorded commands are played back by a scripted agent through the env's normal rollout path
(the real HTTP client, the real container, the real evaluation), so a replay checks the whole
stack: the same actions must reach the same scores. Scores of tasks whose evaluation samples
(MLGym's games simulate random matches) are compared within a tolerance.
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path
from typing import Any

from openai import AsyncOpenAI

from air.env.trajectories import TrajectoryError
from air.env.trajectory_reader import load_trajectory, recorded_commands, recorded_scores
from air.sandbox.errors import SandboxesUnavailable


class ReplayError(Exception):
    """The trajectory cannot be replayed (unreadable, unknown task, no Docker...)."""


def scores_match(recorded: float | None, new: float | None, tolerance: float) -> bool:
    if recorded is None or new is None:
        return recorded is None and new is None
    return math.isclose(recorded, new, rel_tol=tolerance, abs_tol=tolerance)


async def replay_trajectory(
    path: str | Path,
    *,
    task_root: str | None = None,
    image: str | None = None,
    tolerance: float | None = None,
    save_dir: str | Path | None = None,
) -> dict[str, Any]:
    """Replay ``path``; returns {task, commands, recorded, replayed, matches, reproduced, ...}."""
    from air.agents.policies import ScriptPolicy
    from air.agents.server import PolicyServer
    from air.env.load import load_env

    if not Path(path).exists():
        raise ReplayError(f"{path}: no such file or folder")
    try:
        record = load_trajectory(path)
        commands = recorded_commands(path)
    except (TrajectoryError, OSError) as exc:
        raise ReplayError(str(exc)) from exc
    if not commands:
        raise ReplayError(f"{path}: the trajectory holds no command to replay")
    root = task_root
    if root is None and record.source == "air" and record.task_root and Path(record.task_root).is_dir():
        root = record.task_root
    settings = record.env_settings if record.source == "air" else {}
    with tempfile.TemporaryDirectory(prefix="air-replay-") as scratch:
        tmp = str(Path(save_dir).expanduser().resolve()) if save_dir else scratch
        args: dict[str, Any] = {
            "task_configs": [record.task],
            "max_turns": len(commands) + 1,  # room for the closing submit
            "save_trajectories": True,
            "trajectory_dir": tmp,
            "pool_size": 0,
        }
        if root:
            args["task_root"] = root
        for key in ("command_timeout", "long_command_timeout", "observation_max_chars", "network", "env_gpu"):
            if settings.get(key) is not None:
                args[key] = settings[key]
        if image:
            args["image"] = image
        try:
            env = load_env("air_mlgym", **args)
        except ValueError as exc:  # unknown task, bad root, bad settings
            raise ReplayError(str(exc)) from exc
        row = env.get_dataset().to_list()[0]
        with PolicyServer(ScriptPolicy(commands), model_name="replay") as server:
            client = AsyncOpenAI(base_url=server.base_url, api_key="replay", max_retries=0)
            try:
                outputs = await env.run_group([row], client, "replay", {}, state_columns=["trajectory_path"])
            except SandboxesUnavailable as exc:
                raise ReplayError(str(exc)) from exc
            finally:
                await client.close()
        output = dict(outputs[0])
        if output.get("error"):
            raise ReplayError(f"the replay rollout failed: {output['error']}")
        new_path = output.get("trajectory_path")
        if not new_path:
            raise ReplayError("the replay rollout wrote no trajectory")
        new_record = load_trajectory(new_path)
    (task,) = env.tasks.values()  # the env was loaded with this one task
    if tolerance is None:  # games sample matches; the other entrypoints are deterministic given the files
        tolerance = 0.02 if task.entrypoint == "PythonSubmissionTasks" and record.source == "mlgym" else 1e-4
    recorded, replayed = recorded_scores(record), recorded_scores(new_record)
    pairs = list(zip(recorded, replayed, strict=False))
    matches = [scores_match(a, b, tolerance) for a, b in pairs]
    return {
        "path": str(path),
        "source": record.source,
        "task": record.task,
        "commands": len(commands),
        "metric": task.primary_metric,
        "recorded": recorded,
        "replayed": replayed,
        "matches": matches,
        "tolerance": tolerance,
        "reproduced": bool(pairs) and all(matches) and len(recorded) == len(replayed),
        "reward": output.get("reward"),
        "replay_trajectory": new_path if save_dir else None,
    }


def render_comparison(comparison: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=f"replay of {comparison['path']} ({comparison['task']}, {comparison['commands']} commands)")
    table.add_column("evaluation", justify="right")
    table.add_column(f"recorded {comparison['metric'] or 'score'}", justify="right")
    table.add_column("replayed", justify="right")
    table.add_column("match")
    count = max(len(comparison["recorded"]), len(comparison["replayed"]))
    for i in range(count):
        rec = comparison["recorded"][i] if i < len(comparison["recorded"]) else None
        new = comparison["replayed"][i] if i < len(comparison["replayed"]) else None
        ok = comparison["matches"][i] if i < len(comparison["matches"]) else False
        table.add_row(str(i + 1), _num(rec), _num(new), "[green]yes" if ok else "[red]no")
    console = Console()
    console.print(table)
    verdict = "[green]reproduced" if comparison["reproduced"] else "[red]NOT reproduced"
    console.print(f"{verdict}[/] (tolerance {comparison['tolerance']:g})")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
