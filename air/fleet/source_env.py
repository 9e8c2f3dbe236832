"""The env a fleet's nodes serve: one source's ``[env]`` table, read off today's prime-rl config."""

from __future__ import annotations

import copy
from pathlib import Path

from air.fleet.errors import FleetError
from air.launch.config_files import ConfigLoadError, load_config
from air.launch.config_v1 import sources


def source_env(config: Path, source: str | None = None) -> dict:
    """The ``env`` table of the train source named ``source`` (or of the only one), as the env server gets it."""
    try:
        loaded = load_config(config)
    except ConfigLoadError as exc:
        raise FleetError(str(exc)) from exc
    if loaded.generation != "v1":
        raise FleetError(
            f"{config} is a config for prime-rl c87c19b: env nodes need today's prime-rl (configs/mlgym-v1/)"
        )
    found = {entry.get("name") or f"{table}[{index}]": entry for table, index, entry in sources(loaded.data)}
    if source is None:
        if len(found) != 1:
            raise FleetError(f"{config} has {len(found)} sources ({', '.join(found)}): name one with --source")
        (entry,) = found.values()
    elif source in found:
        entry = found[source]
    else:
        raise FleetError(f"{config} has no source {source!r}; its sources: {', '.join(found) or 'none'}")
    env = entry.get("env")
    if not isinstance(env, dict) or not isinstance(env.get("taskset"), dict) or not env["taskset"].get("id"):
        raise FleetError(f"source {source or ''!r} of {config} has no [env.taskset] with an id")
    return copy.deepcopy(env)
