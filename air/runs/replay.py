"""Re-run a recorded trajectory (ours, or an MLGym run) in a fresh container and compare scores.

The recorded commands are played back by a scripted agent through the env's normal rollout path
(the real HTTP client, the real container, the real evaluation), so a replay checks the whole
stack: the same actions must reach the same scores. Our recordings carry their evaluation seed
(``env.seeds``), so even a game's sampled matches replay exactly; MLGym's runs and our older ones
carry none, and the scores of tasks whose evaluation samples (MLGym's games) are compared within 2%.
"""

from __future__ import annotations

import math
import signal
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from openai import AsyncOpenAI

from air.env.trajectories import TrajectoryError, TrajectoryRecord
from air.env.trajectory_reader import load_trajectory, recorded_commands, recorded_scores
from air.runs.interruption import GracefulInterrupt, Terminated
from air.runs.replay_checkout import checkout_differences
from air.sandbox.errors import SandboxesUnavailable
from air.sandbox.neutral import neutral

if TYPE_CHECKING:
    from rich.console import Console

SAMPLED_TOLERANCE = 0.02  # a game's score over fresh random matches (MLGym's: 10,000 of them)
EXACT_TOLERANCE = 1e-4


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
    """Replay ``path``; returns {task, commands, recorded, replayed, matches, reproduced, notes, ...}.
    SIGTERM during the rollout cancels it as Ctrl-C does (its container removed), then raises Terminated."""
    from air.policies.scripted import ScriptPolicy
    from air.serving.server import PolicyServer

    record, commands = _read(path)
    notes: list[str] = []
    if not commands:
        notes.append("the run ended without a command: its untouched workspace is submitted, as MLGym did")
    image, image_note = choose_image(image, record.image)
    notes += [image_note] if image_note else []
    with tempfile.TemporaryDirectory(prefix="air-replay-") as scratch:
        tmp = str(Path(save_dir).expanduser().resolve()) if save_dir else scratch
        env = _load(record, commands, task_root, image, tmp)
        (task,) = env.tasks.values()  # the env was loaded with this one task
        differences = checkout_differences(record, task.workspace_files(), set(task.secret_files))
        row = env.get_dataset().to_list()[0]
        with PolicyServer(ScriptPolicy(commands), model_name="replay") as server:
            client = AsyncOpenAI(base_url=server.base_url, api_key="replay", max_retries=0)
            try:
                async with GracefulInterrupt(getattr(env, "core", None), signal.SIGTERM) as stop:
                    outputs = await env.run_group([row], client, "replay", {}, state_columns=["trajectory_path"])
                await stop.settle()  # the rollout cut short has removed its container
            except SandboxesUnavailable as exc:
                raise ReplayError(str(exc)) from exc
            finally:
                await client.close()
        if stop.interrupted:
            raise Terminated("the replay was stopped (SIGTERM) before it ended; its container is removed")
        output = dict(outputs[0])
        if output.get("error"):
            raise ReplayError(f"the replay rollout failed: {output['error']}")
        new_path = output.get("trajectory_path")
        if not new_path:
            raise ReplayError("the replay rollout wrote no trajectory")
        new_record = load_trajectory(new_path)
    sampled = task.entrypoint == "PythonSubmissionTasks" and record.evaluation_seed is None
    if tolerance is None:  # a seeded evaluation replays exactly; the other entrypoints are deterministic anyway
        tolerance = SAMPLED_TOLERANCE if sampled else EXACT_TOLERANCE
    if sampled:
        notes.append("recorded without an evaluation seed: the evaluator's random matches are drawn afresh")
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
        "evaluation_seed": new_record.evaluation_seed,
        "image": new_record.image,
        "checkout_differences": differences,
        "notes": notes,
        "replay_trajectory": new_path if save_dir else None,
    }


def _read(path: str | Path) -> tuple[TrajectoryRecord, list[str]]:
    if not Path(path).exists():
        raise ReplayError(f"{path}: no such file or folder")
    try:
        record = load_trajectory(path)
    except (TrajectoryError, OSError) as exc:
        raise ReplayError(str(exc)) from exc
    commands = recorded_commands(record)
    if not commands and not recorded_scores(record):
        raise ReplayError(f"{path}: nothing to replay: the trajectory holds no command and no score")
    return record, commands


def _load(record: TrajectoryRecord, commands: list[str], task_root: str | None, image: str | None, out: str) -> Any:
    """The env, with the recording's task, settings and evaluation seed (a vf.Environment)."""
    from air.env.load import load_env

    root = task_root
    if root is None and record.source == "air" and record.task_root and Path(record.task_root).is_dir():
        root = record.task_root
    settings = record.env_settings if record.source == "air" else {}
    args: dict[str, Any] = {
        "task_configs": [record.task],
        "max_turns": len(commands) + 1,  # room for the closing submit
        "save_trajectories": True,
        "trajectory_dir": out,
        "pool_size": 0,
    }
    if root:
        args["task_root"] = root
    for key in ("command_timeout", "long_command_timeout", "observation_max_chars", "network", "env_gpu"):
        if settings.get(key) is not None:
            args[key] = settings[key]
    if record.evaluation_seed is not None:
        args["evaluation_seed"] = record.evaluation_seed
    if image:
        args["image"] = image
    try:
        return load_env("air_mlgym", **args)
    except ValueError as exc:  # unknown task, missing data, bad root, bad settings
        hint = ""
        if root is None:
            where = "an MLGym checkout" if record.source == "mlgym" else "the folder it ran on"
            hint = f" (replaying {record.task} needs its task root: --task-root DIR, e.g. {where})"
        raise ReplayError(f"{exc}{hint}") from exc


def choose_image(explicit: str | None, recorded: str | None) -> tuple[str | None, str | None]:
    """(the image to replay on, None for the default; a note for the user, or None). An explicit one wins;
    else the recorded one if this machine has it; else the default, saying so."""
    from air.sandbox.config import SandboxConfig
    from air.sandbox.container import require_image
    from air.sandbox.errors import SandboxError, SandboxImageMissing

    if explicit or not recorded:
        return explicit, None
    try:
        require_image(SandboxConfig(image=recorded))
    except SandboxImageMissing:
        default = SandboxConfig().resolved_image()
        return None, f"the recorded image {recorded} is not on this machine: replaying on {default} (--image to choose)"
    except SandboxError:
        pass  # the engine cannot tell now: the replay's own start reports it
    return recorded, None


def render_comparison(comparison: dict[str, Any], console: Console) -> None:
    from rich.markup import escape
    from rich.table import Table

    # The title on a line of its own: as the table's title it would wrap at the table's width, mid-path.
    title = f"replay of {comparison['path']} ({comparison['task']}, {comparison['commands']} commands)"
    console.print(neutral(title), style="italic", markup=False, highlight=False)  # the task: the record's word
    table = Table()
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
    console.print(table)
    for note in comparison["notes"]:
        console.print(f"note: {neutral(note, markup=True)}")  # it may name the record's image
    if comparison["checkout_differences"]:
        files = "; ".join(comparison["checkout_differences"])
        console.print(f"[yellow]warning:[/] the checkout differs from the run's: {escape(files)}")
    verdict = "[green]reproduced" if comparison["reproduced"] else "[red]NOT reproduced"
    how = f"tolerance {comparison['tolerance']:g}, evaluation seed {comparison['evaluation_seed']}"
    console.print(f"{verdict}[/] ({how}, image {comparison['image']})")


def _num(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"
