"""A combined config for today's prime-rl (verifiers v1), read for what the rehearsal must know and
turned into the rehearsal's own copy.

Changed from the config, and only this: ``model.name`` is the tiny model and the client points at the
scripted server; ``max_steps`` is ``--steps``; the run goes to the rehearsal's folder; rollouts and
weights travel by files (the stand-in trainer reads and publishes files); the renderer is ``default``
(the tiny model's own chat template: the config's renderer is for its real model); the in-flight cap
starts at the batch size (the scripted server has no KV cache to report); env servers the rehearsal
starts take ports that are free on this host; their tasksets write trajectories into the rehearsal's
folder. What needs a network, GPUs or a trainer is dropped: monitors, checkpoints, ``[inference]``,
evals. Refused with the reason: an algorithm that needs a second model (a teacher or a reference).
A source with ``serve.address`` is left as it is: its env server runs elsewhere, started separately.
"""

from __future__ import annotations

import copy
import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from air.fleet.errors import FleetError
from air.fleet.folder import FleetFolder
from air.launch.config_v1 import plugin_args, sources, taskset_of
from air.rehearsal.errors import RehearsalError

DROPPED = ("monitors", "ckpt", "inference")
SECOND_MODEL_ALGOS = ("opd", "opsd")  # on-policy distillation: a teacher model's server
ENV_DROPPED = ("env_gpu",)  # task containers run without GPUs here; the data path is the same


@dataclass
class V1Source:
    name: str
    taskset: dict[str, Any]
    address: str | None  # set: an env server started separately (another node); None: the rehearsal starts it
    fleet: Path | None = None  # env nodes (air/fleet): the rehearsal starts a spreader at ``address`` over them

    @property
    def external(self) -> bool:
        return self.address is not None


@dataclass
class V1Plan:
    path: Path
    raw: dict[str, Any]
    sources: list[V1Source]
    group_size: int
    batch_size: int | None
    seq_len: int | None
    dropped: list[str] = field(default_factory=list)

    @property
    def max_model_len(self) -> int | None:
        return self.seq_len

    @property
    def env_images(self) -> list[str]:
        """The images the rehearsal's own env servers need ("" for the recipe's tag)."""
        return sorted({str(s.taskset.get("image") or "") for s in self.sources if not s.external})


def plan_v1(
    path: Path, raw: dict[str, Any], external: dict[str, str] | None = None, env_nodes: dict[str, Path] | None = None
) -> V1Plan:
    """``external``: source name -> the address of its env server started separately, as if the
    config said so in the source's ``serve.address``. ``env_nodes``: source name -> a fleet folder: a spreader
    the rehearsal starts on a free loopback port stands for that source's env server."""
    env_nodes = env_nodes or {}
    both = sorted(set(env_nodes) & set(external or {}))
    if both:
        raise RehearsalError(f"source {both[0]!r}: both an external env server and env nodes; name one")
    spread = {name: f"tcp://127.0.0.1:{free_port_block(1)}" for name in env_nodes}
    raw = place_external_servers(path, raw, {**(external or {}), **spread})
    orchestrator = raw.get("orchestrator") if isinstance(raw.get("orchestrator"), dict) else {}
    algo = orchestrator.get("algo", {}) if isinstance(orchestrator.get("algo"), dict) else {}
    if algo.get("type") in SECOND_MODEL_ALGOS or algo.get("reference") or algo.get("teacher"):
        raise RehearsalError(f"{path}: algo {algo.get('type')!r} needs a second model's server; the rehearsal has one")
    found = []
    for table, index, source in sources(raw):
        if table != "orchestrator.train.source":
            continue
        taskset = taskset_of(source)
        if not taskset.get("id"):
            raise RehearsalError(f"{path}: [[{table}]] #{index + 1} has no env.taskset.id")
        serve = source.get("serve") if isinstance(source.get("serve"), dict) else {}
        name = str(source.get("name") or taskset["id"])
        fleet = env_nodes.get(name)
        found.append(V1Source(name=name, taskset=dict(taskset), address=serve.get("address"), fleet=fleet))
    if not found:
        raise RehearsalError(f"{path}: no [[orchestrator.train.source]]: nothing to rehearse")
    dropped = [key for key in DROPPED if key in raw]
    dropped += ["orchestrator.eval"] if "eval" in orchestrator else []
    dropped += ["renderer (the tiny model's chat template stands in)"]
    dropped += sorted({f"env_gpu of {s.name}" for s in found if s.taskset.get("env_gpu") and not s.external})
    batch_size = orchestrator.get("batch_size")
    return V1Plan(
        path=path,
        raw=raw,
        sources=found,
        group_size=int(orchestrator.get("group_size", 1)),
        batch_size=int(batch_size) if batch_size is not None else None,
        seq_len=raw.get("seq_len") or orchestrator.get("seq_len"),
        dropped=dropped,
    )


def place_external_servers(path: Path, raw: dict[str, Any], external: dict[str, str]) -> dict[str, Any]:
    if not external:
        return raw
    raw = copy.deepcopy(raw)
    named = {}
    for table, _, source in sources(raw):
        if table == "orchestrator.train.source":
            named[str(source.get("name") or taskset_of(source).get("id"))] = source
    unknown = sorted(set(external) - set(named))
    if unknown:
        raise RehearsalError(
            f"{path}: no train source named {', '.join(map(repr, unknown))} (sources: {sorted(named)})"
        )
    for name, address in external.items():
        named[name].setdefault("serve", {})["address"] = address
    return raw


def rehearsal_config(
    plan: V1Plan, *, steps: int, model_dir: Path, base_url: str, out: Path, base_port: int, env_args: dict[str, Any]
) -> dict[str, Any]:
    """The rehearsal's combined config (see the module's docstring for every change)."""
    raw = copy.deepcopy(plan.raw)
    for key in (*DROPPED, "weight_broadcast", "rollout_transport", "output_dir", "run", "clean", "resume"):
        raw.pop(key, None)
    raw.update(max_steps=steps, output_dir=str(out), run={"name": "run"})
    raw["weight_broadcast"] = {"type": "filesystem"}
    raw["rollout_transport"] = {"type": "filesystem"}
    raw.setdefault("model", {})["name"] = str(model_dir)
    for section in ("trainer", "orchestrator"):
        if isinstance(raw.get(section), dict) and isinstance(raw[section].get("model"), dict):
            raw[section]["model"].pop("name", None)  # the shared [model] name must win
    orchestrator = raw.setdefault("orchestrator", {})
    orchestrator.pop("eval", None)
    orchestrator.setdefault("model", {})["client"] = {"base_url": base_url}
    orchestrator["renderer"] = {"name": "default"}
    orchestrator["env_server_base_port"] = base_port
    concurrency = orchestrator.setdefault("concurrency", {})
    inflight = max(plan.batch_size or plan.group_size, plan.group_size)
    if concurrency.get("max_inflight"):  # prime-rl refuses a start above the config's ceiling
        inflight = min(inflight, int(concurrency["max_inflight"]))
    concurrency.setdefault("initial_inflight", inflight)
    for source in orchestrator.get("train", {}).get("source", []):
        if (source.get("serve") or {}).get("address"):
            continue  # externally managed: its env server has its own config
        taskset = source["env"]["taskset"]
        for key in ENV_DROPPED:
            taskset.pop(key, None)
        taskset.update(env_args)
    return raw


def managed_sources(plan: V1Plan) -> list[V1Source]:
    return [source for source in plan.sources if not source.external]


def check_external_servers(plan: V1Plan, timeout: float = 5.0) -> None:
    """A source pointing at an env server elsewhere must find one listening there now: prime-rl's
    orchestrator would wait ten minutes for it before saying so."""
    for source in plan.sources:
        if not source.external:
            continue
        if source.fleet is not None:
            check_env_nodes(source.name, source.fleet)
            continue
        parsed = urlparse(str(source.address))
        if parsed.scheme != "tcp" or not parsed.hostname or not parsed.port:
            raise RehearsalError(f"source {source.name!r}: serve.address {source.address!r} is not tcp://HOST:PORT")
        try:
            socket.create_connection((parsed.hostname, parsed.port), timeout=timeout).close()
        except OSError as exc:
            raise RehearsalError(
                f"source {source.name!r}: no env server answers at {source.address} ({exc.strerror or exc}); "
                "start it first (docs/prime-rl-v1.md: 'Env servers on other nodes')"
            ) from exc


def free_port_block(count: int, tries: int = 200) -> int:
    """A first port such that ``count`` consecutive ports are free here now (prime-rl gives the env
    servers ``env_server_base_port + index``; a fixed 5000 would collide with a second rehearsal)."""
    import random

    for _ in range(tries):
        start = random.randint(20000, 60000 - count)
        sockets = []
        try:
            for port in range(start, start + count):
                probe = socket.socket()
                sockets.append(probe)
                probe.bind(("127.0.0.1", port))
            return start
        except OSError:
            continue
        finally:
            for probe in sockets:
                probe.close()
    raise RehearsalError(f"no {count} consecutive free ports found for the env servers")


def check_tasksets_load(plan: V1Plan) -> None:
    """Each air_mlgym taskset loads here as the orchestrator will load it (the tasks listed, no
    container), so a missing MLGym checkout or a wrong argument is named before prime-rl starts."""
    import os

    from air.env.core import MLGymCore
    from air.env.settings import parse_env_settings

    for source in plan.sources:
        if source.taskset.get("id") != "air_mlgym":
            continue  # another plugin: prime-rl's own loading names its faults
        args = {k: v for k, v in plugin_args(source.taskset).items() if k not in ENV_DROPPED}
        try:
            MLGymCore(parse_env_settings(args))
        except Exception as exc:
            hint = ""
            if "task_root" not in args and not os.environ.get("MLGYM_ROOT"):
                hint = " (its tasks come from $MLGYM_ROOT, which is not set: point it at an MLGym checkout)"
            raise RehearsalError(f"source {source.name!r} (air_mlgym) does not load: {exc}{hint}") from exc


def check_env_nodes(name: str, folder: Path) -> None:
    """The fleet folder holds the run's keys and at least one env node has joined."""
    fleet = FleetFolder(folder)
    try:
        fleet.key_pair("client"), fleet.key_pair("node")
    except FleetError as exc:
        raise RehearsalError(f"source {name!r}: {exc}") from exc
    if not fleet.records():
        raise RehearsalError(
            f"source {name!r}: no env node has joined {fleet.nodes}: start them first (air fleet submit, or "
            "air fleet node on each host)"
        )


__all__ = [
    "V1Plan",
    "V1Source",
    "check_env_nodes",
    "check_external_servers",
    "check_tasksets_load",
    "free_port_block",
    "plan_v1",
    "rehearsal_config",
]
