"""Configs for today's prime-rl (verifiers v1, env servers), beside the classic pin's: which generation a
file is written for, where its envs are, what its schema can check, and which GPUs its deployment takes.

An env server's own file (``uv run env-server @ FILE``, ``configs/mlgym-v1/env-servers/``) is one source's
``env`` and ``serve`` tables at the top level, nothing else; where its ``serve.address`` binds, and where a
source's points, is told apart from loopback here: prime-rl's env server authenticates nothing.

A v1 config names its envs as sources (``[[orchestrator.train.source]]`` with ``env.taskset``), hands GPUs
out by count (``[deployment]``: inference from GPU 0, then the trainer), and groups rollouts by
``group_size``. prime-rl resolves a taskset's own keys and an env's seats from the installed plugin at load
time, so its static schema holds neither: the view checked against it leaves them out, and air_mlgym's are
checked with its own settings model (``config_rules``).
"""

from __future__ import annotations

import copy
import ipaddress
from typing import Any, Literal

Generation = Literal["classic", "v1"]  # prime-rl c87c19b, verifiers 0.1.x | prime-rl main, verifiers v1
V1_COMMIT = "559b447"  # the prime-rl commit the v1 configs and schema are checked against
CONFIG_FOLDERS = {"classic": "configs/mlgym", "v1": "configs/mlgym-v1"}

V1_ONLY_KEYS = {"deployment", "monitors", "slurm", "run", "dry_run"}
CLASSIC_ONLY_KEYS = {"inference_gpu_ids", "trainer_gpu_ids", "teacher_gpu_ids", "max_async_level", "wandb"}
SOURCE_TABLES = ("orchestrator.train.source", "orchestrator.eval.source")
BASE_TASKSET_KEYS = ("id", "task", "system_prompt")  # every taskset's; the rest are the plugin's own
SEATS = ("player", "agent")  # air_mlgym's seat, and the single-agent env's
LOCAL_TRANSPORTS = ("ipc", "inproc")  # ZMQ transports that never leave the machine


def is_env_server(data: dict[str, Any]) -> bool:
    """An env server's file (prime-rl's EnvServerConfig): a source's ``env`` table, with its taskset, at the
    top (a classic orchestrator file's ``env`` is a list); the schema names any other key it has."""
    env = data.get("env")
    return isinstance(env, dict) and "taskset" in env


def detect_generation(data: dict[str, Any]) -> Generation:
    """``v1`` for a file written for today's prime-rl, else ``classic``."""
    if is_env_server(data):
        return "v1"
    orchestrator = data.get("orchestrator")
    orchestrator = orchestrator if isinstance(orchestrator, dict) else {}
    if "env" in orchestrator or CLASSIC_ONLY_KEYS & data.keys() or "rollouts_per_example" in orchestrator:
        return "classic"
    if V1_ONLY_KEYS & data.keys() or "train" in orchestrator or "group_size" in orchestrator:
        return "v1"
    return "classic"


def sources(data: dict[str, Any]) -> list[tuple[str, int, dict[str, Any]]]:
    """(table, index, source) for every train and eval source of a combined config; an env server's file is
    one source, at table ``""``."""
    if is_env_server(data):
        return [("", 0, data)]
    found = []
    for table in SOURCE_TABLES:
        node: Any = data
        for part in table.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        for index, source in enumerate(node if isinstance(node, list) else []):
            if isinstance(source, dict):
                found.append((table, index, source))
    return found


def serve_addresses(data: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, address) of each ``serve.address`` set: an env server's bind address (its file), or where the
    orchestrator connects to a source's server started elsewhere (a combined config)."""
    found = []
    for table, index, source in sources(data):
        serve = source.get("serve")
        address = serve.get("address") if isinstance(serve, dict) else None
        if isinstance(address, str):
            found.append((f"{table}[{index}].serve.address" if table else "serve.address", address))
    return found


def beyond_loopback(address: str) -> bool:
    """Whether a ZMQ address is reachable from other machines: anything but loopback (127.0.0.0/8, ::1,
    localhost) or a local transport. ``*``, a host name or an interface name count as beyond."""
    scheme, _, rest = address.partition("://")
    if scheme in LOCAL_TRANSPORTS:
        return False
    host = rest.rsplit(":", 1)[0].strip("[]").lower()
    if host == "localhost":
        return False
    try:
        return not ipaddress.ip_address(host).is_loopback
    except ValueError:
        return True


def taskset_of(source: dict[str, Any]) -> dict[str, Any]:
    env = source.get("env")
    taskset = env.get("taskset") if isinstance(env, dict) else None
    return taskset if isinstance(taskset, dict) else {}


def plugin_args(taskset: dict[str, Any]) -> dict[str, Any]:
    """The taskset's own keys: for air_mlgym, its env arguments."""
    return {key: value for key, value in taskset.items() if key not in BASE_TASKSET_KEYS}


def _null_strings(value: Any) -> Any:
    """TOML has no null: prime-rl's config loader reads the string "None" as one (``compile = "None"``)."""
    if isinstance(value, dict):
        return {key: _null_strings(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_null_strings(item) for item in value]
    return None if value == "None" else value


def schema_view(data: dict[str, Any]) -> dict[str, Any]:
    """The config with what the static schema cannot know taken out (tasksets' own keys and the seats), and
    "None" read as prime-rl reads it."""
    view = _null_strings(copy.deepcopy(data))
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
    (only with an [inference] table), then the trainer, counting from GPU 0 of what the node shows. An env
    server's file deploys no model."""
    if is_env_server(data):
        return {}
    deployment = data.get("deployment") if isinstance(data.get("deployment"), dict) else {}
    if deployment.get("type", "single_node") != "single_node":
        return {}
    infer = int(deployment.get("num_infer_gpus", 1)) if data.get("inference") is not None else 0
    train = int(deployment.get("num_train_gpus", 1))
    sets = {"trainer": tuple(range(infer, infer + train))}
    if infer:
        sets = {"inference": tuple(range(infer)), **sets}
    return sets
