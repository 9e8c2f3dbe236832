"""Configs for today's prime-rl (verifiers v1, env servers), beside the classic pin's: which generation a
file is written for, where its envs are, what its schema can check, and which GPUs its deployment takes.

A v1 config names its envs as sources (``[[orchestrator.train.source]]`` with ``env.taskset``), hands GPUs
out by count (``[deployment]``: inference from GPU 0, then the trainer), and groups rollouts by
``group_size``. prime-rl resolves a taskset's own keys and an env's seats from the installed plugin at load
time, so its static schema holds neither: the view checked against it leaves them out, and air_mlgym's are
checked with its own settings model (``config_rules``).
"""

from __future__ import annotations

import copy
from typing import Any

Generation = str  # "classic" (prime-rl c87c19b, verifiers 0.1.x) | "v1" (prime-rl main, verifiers v1)
V1_COMMIT = "559b447"  # the prime-rl commit the v1 configs and schema are checked against
CONFIG_FOLDERS = {"classic": "configs/mlgym", "v1": "configs/mlgym-v1"}

V1_ONLY_KEYS = {"deployment", "monitors", "slurm", "run", "dry_run"}
CLASSIC_ONLY_KEYS = {"inference_gpu_ids", "trainer_gpu_ids", "teacher_gpu_ids", "max_async_level", "wandb"}
SOURCE_TABLES = ("orchestrator.train.source", "orchestrator.eval.source")
BASE_TASKSET_KEYS = ("id", "task", "system_prompt")  # every taskset's; the rest are the plugin's own
SEATS = ("player", "agent")  # air_mlgym's seat, and the single-agent env's


def detect_generation(data: dict[str, Any]) -> Generation:
    """``v1`` for a file written for today's prime-rl, else ``classic``."""
    orchestrator = data.get("orchestrator")
    orchestrator = orchestrator if isinstance(orchestrator, dict) else {}
    if "env" in orchestrator or CLASSIC_ONLY_KEYS & data.keys() or "rollouts_per_example" in orchestrator:
        return "classic"
    if V1_ONLY_KEYS & data.keys() or "train" in orchestrator or "group_size" in orchestrator:
        return "v1"
    return "classic"


def sources(data: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(table, index, source) for every train and eval source of a combined config."""
    found = []
    for table in SOURCE_TABLES:
        node: Any = data
        for part in table.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        for index, source in enumerate(node if isinstance(node, list) else []):
            if isinstance(source, dict):
                found.append((table, index, source))
    return found


def taskset_of(source: dict[str, Any]) -> dict[str, Any]:
    env = source.get("env")
    taskset = env.get("taskset") if isinstance(env, dict) else None
    return taskset if isinstance(taskset, dict) else {}


def plugin_args(taskset: dict[str, Any]) -> dict[str, Any]:
    """The taskset's own keys: for air_mlgym, its env arguments."""
    return {key: value for key, value in taskset.items() if key not in BASE_TASKSET_KEYS}


def schema_view(data: dict[str, Any]) -> dict[str, Any]:
    """The config with what the static schema cannot know taken out: tasksets' own keys and the seats."""
    view = copy.deepcopy(data)
    for _, _, source in sources(view):
        env = source.get("env")
        if not isinstance(env, dict):
            continue
        taskset = env.get("taskset")
        if isinstance(taskset, dict):
            env["taskset"] = {key: value for key, value in taskset.items() if key in BASE_TASKSET_KEYS}
        for seat in SEATS:
            env.pop(seat, None)
    return view


def deployment_gpus(data: dict[str, Any]) -> dict[str, tuple[int, ...]]:
    """The GPUs a single-node deployment takes, as prime-rl's launcher hands them out: inference first
    (only with an [inference] table), then the trainer, counting from GPU 0 of what the node shows."""
    deployment = data.get("deployment") if isinstance(data.get("deployment"), dict) else {}
    if deployment.get("type", "single_node") != "single_node":
        return {}
    infer = int(deployment.get("num_infer_gpus", 1)) if data.get("inference") is not None else 0
    train = int(deployment.get("num_train_gpus", 1))
    sets = {"trainer": tuple(range(infer, infer + train))}
    if infer:
        sets = {"inference": tuple(range(infer)), **sets}
    return sets
