"""The rules prime-rl's schema cannot say: batch and group sizes, sequence lengths, GPU sets, env ids and
their arguments, split files that must agree; and the report ``air check`` prints from them."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air.launch.config_files import (
    ConfigLoadError,
    ConfigProblem,
    EnvEntry,
    LoadedConfig,
    _default_note,
    _get,
    effective,
    load_config,
    schema_problems,
)
from air.launch.config_schema import schema_default
from air.launch.config_v1 import deployment_gpus, plugin_args, sources, taskset_of

OUR_ENV_IDS = ("air_mlgym", "simple_env")


def env_entries(config: LoadedConfig) -> list[EnvEntry]:
    if config.generation == "v1":  # a source's taskset: its id, and its own keys as the env's arguments
        entries = []
        for table, i, source in sources(config.data):
            taskset = taskset_of(source)
            env_id = str(taskset.get("id", ""))
            entries.append(EnvEntry(i, env_id, str(source.get("name") or env_id), plugin_args(taskset), table=table))
        return entries
    key = "orchestrator.env" if config.kind == "rl" else "env"
    if config.kind not in ("rl", "orchestrator"):
        return []
    raw = _get(config.data, key)
    if raw is None:
        raw = schema_default("orchestrator.env")
    entries = []
    for i, table in enumerate(raw if isinstance(raw, list) else []):
        if isinstance(table, dict):
            env_id = str(table.get("id", "reverse-text"))
            args = table.get("args") if isinstance(table.get("args"), dict) else {}
            entries.append(EnvEntry(i, env_id, str(table.get("name") or env_id), args))
    return entries


def seq_lens(config: LoadedConfig) -> tuple[int | None, int | None]:
    """(trainer, orchestrator) seq_len as prime-rl resolves them (a top-level seq_len sets both)."""
    if config.kind == "rl":
        shared = config.data.get("seq_len")
        if shared is not None:
            return shared, shared
        return effective(config, "trainer.model.seq_len"), effective(config, "orchestrator.seq_len")
    if config.kind == "trainer":
        return effective(config, "trainer.model.seq_len"), None
    if config.kind == "orchestrator":
        return None, effective(config, "orchestrator.seq_len")
    return None, None


def gpu_sets(config: LoadedConfig) -> dict[str, tuple[int, ...]]:
    """Who uses which GPUs: inference, trainer, teacher (rl configs) and each env's ``env_gpu``."""
    from air.sandbox.config import parse_env_gpu

    sets: dict[str, tuple[int, ...]] = {}
    if config.generation == "v1":
        sets.update(deployment_gpus(config.data))  # none for an env server's file
    elif config.kind == "rl":
        if config.data.get("inference") is not None:  # prime-rl starts vLLM only with an [inference] table
            sets["inference"] = tuple(effective(config, "inference_gpu_ids"))
        sets["trainer"] = tuple(effective(config, "trainer_gpu_ids"))
        if config.data.get("teacher_gpu_ids"):
            sets["teacher"] = tuple(config.data["teacher_gpu_ids"])
    for entry in env_entries(config):
        if entry.id in OUR_ENV_IDS and entry.args.get("env_gpu") is not None:
            try:
                sets[f"env {entry.name}"] = tuple(int(g) for g in parse_env_gpu(str(entry.args["env_gpu"])))
            except ValueError:
                pass  # reported by the env-args check
    return sets


def cross_field_problems(config: LoadedConfig) -> list[ConfigProblem]:
    """What prime-rl's schema cannot say, and what prime-rl only finds after start-up (or never)."""
    f = config.label
    problems: list[ConfigProblem] = []
    group_key = "orchestrator.group_size" if config.generation == "v1" else "orchestrator.rollouts_per_example"
    if config.kind in ("rl", "orchestrator"):
        o = "orchestrator." if config.kind == "rl" else ""
        batch = effective(config, "orchestrator.batch_size")
        group = effective(config, group_key)
        if isinstance(batch, int) and isinstance(group, int) and group > 0 and batch % group:
            problems.append(
                ConfigProblem(
                    f,
                    f"{o}batch_size",
                    f"{batch}{_default_note(config, 'orchestrator.batch_size')} is not divisible by "
                    f"{o}{group_key.removeprefix('orchestrator.')} = {group}"
                    f"{_default_note(config, group_key)}",
                    f"use a multiple of {group}, e.g. {max(group, batch - batch % group)}",
                )
            )
        v1 = config.generation == "v1"  # env servers scale themselves: no workers_per_env, max_concurrent
        workers = None if v1 else effective(config, "orchestrator.workers_per_env")
        concurrent = None if v1 else effective(config, "orchestrator.max_concurrent")
        if isinstance(concurrent, int) and isinstance(group, int) and isinstance(workers, int):
            if concurrent < group * workers:
                problems.append(
                    ConfigProblem(
                        f,
                        f"{o}max_concurrent",
                        f"{concurrent} is below rollouts_per_example x workers_per_env ({group * workers})",
                        f"raise it to at least {group * workers}",
                    )
                )
        problems += _env_problems(config)
    if config.kind == "env-server":
        problems += _env_problems(config)
    trainer_len, orch_len = seq_lens(config)
    if isinstance(trainer_len, int) and isinstance(orch_len, int) and trainer_len < orch_len:
        problems.append(
            ConfigProblem(
                f,
                "trainer.model.seq_len",
                f"{trainer_len} is shorter than orchestrator.seq_len ({orch_len}): samples would not fit",
                "set the top-level seq_len (it sets both) or raise trainer.model.seq_len",
            )
        )
    if config.kind == "rl":
        problems += _gpu_overlap_problems(config)
    return problems


def _gpu_overlap_problems(config: LoadedConfig) -> list[ConfigProblem]:
    sets = gpu_sets(config)
    problems = []
    names = list(sets)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            if a.startswith("env ") and b.startswith("env "):
                continue  # task containers of several envs may share a card
            shared = sorted(set(sets[a]) & set(sets[b]))
            if shared:
                problems.append(
                    ConfigProblem(
                        config.label,
                        gpu_key(config, a),
                        f"GPU {_ids(shared)} assigned to both {a} ({_ids(sets[a])}) and {b} ({_ids(sets[b])})",
                        "give each role its own GPUs: inference, trainer and env_gpu must not overlap",
                    )
                )
        if len(set(sets[a])) != len(sets[a]):
            problems.append(ConfigProblem(config.label, gpu_key(config, a), f"lists a GPU twice: {_ids(sets[a])}"))
    return problems


def gpu_key(config: LoadedConfig, role: str) -> str:
    """The key that assigns a role of ``gpu_sets`` its GPUs (what a user edits to move it)."""
    if role.startswith("env "):
        entry = next(e for e in env_entries(config) if f"env {e.name}" == role)
        return f"{_env_key(config, entry)}.env_gpu"
    if config.generation == "v1":
        return f"deployment.num_{'infer' if role == 'inference' else 'train'}_gpus"
    return f"{role}_gpu_ids"


def _ids(ids: Iterable[int]) -> str:
    return ",".join(str(i) for i in ids)


def _env_problems(config: LoadedConfig) -> list[ConfigProblem]:
    problems = []
    entries = env_entries(config)
    seen: dict[str, EnvEntry] = {}
    for entry in entries:
        if entry.name in seen:
            problems.append(
                ConfigProblem(
                    config.label,
                    f"{_table_key(config, entry)}.name",
                    f"env name {entry.name!r} is used twice (also {_table_key(config, seen[entry.name])})",
                    "give every env a unique name",
                )
            )
        seen.setdefault(entry.name, entry)
        problems += [
            ConfigProblem(config.label, f"{_env_key(config, entry)}.{key}", message, fix)
            for key, message, fix in env_args_problems(entry.id, entry.args)
        ]
    return problems


def _table_key(config: LoadedConfig, entry: EnvEntry) -> str:
    return f"env[{entry.index}]" if config.kind == "orchestrator" else entry.key


def _env_key(config: LoadedConfig, entry: EnvEntry) -> str:
    """Where an env's arguments are, as the file writes it."""
    return f"env[{entry.index}].args" if config.kind == "orchestrator" else entry.args_key


def env_args_problems(env_id: str, args: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Check an env's args with the settings model its ``load_environment`` uses; ids not ours pass."""
    from pydantic import ValidationError

    if env_id == "air_mlgym":
        from air.env.settings import env_settings_problems

        return [(key, message, _fix_of(message)) for key, message in env_settings_problems(dict(args))]
    if env_id == "simple_env":
        from air.env.simple_env_settings import SimpleEnvSettings

        try:
            SimpleEnvSettings.model_validate(args)
        except ValidationError as exc:
            return [(".".join(map(str, e["loc"])), e["msg"], "") for e in exc.errors()]
    return []


def _fix_of(message: str) -> str:
    if "did you mean" in message:
        return "rename it to " + message.split("did you mean", 1)[1].strip(" ?)")
    return ""


def split_run_problems(configs: Sequence[LoadedConfig]) -> list[ConfigProblem]:
    """Checks across the separate orchestrator/trainer/inference files of one distributed run."""
    by_kind = {c.kind: c for c in configs}
    problems = []
    trainer, orch = by_kind.get("trainer"), by_kind.get("orchestrator")
    if trainer and orch:
        t_len, o_len = seq_lens(trainer)[0], seq_lens(orch)[1]
        if isinstance(t_len, int) and isinstance(o_len, int) and t_len < o_len:
            problems.append(
                ConfigProblem(
                    trainer.label,
                    "model.seq_len",
                    f"{t_len} is shorter than {orch.label}'s seq_len ({o_len})",
                    "make the trainer's seq_len at least the orchestrator's",
                )
            )
    # `model.name` in every kind of file (the combined config's [model] sets all three processes).
    names = {c.label: _get(c.data, "model.name") for c in configs if _get(c.data, "model.name")}
    if len(set(names.values())) > 1:
        listing = ", ".join(f"{label}: {name}" for label, name in names.items())
        first = next(iter(names))
        problems.append(
            ConfigProblem(first, "model.name", f"the files name different models ({listing})", "use one model")
        )
    return problems


@dataclass
class ConfigReport:
    configs: list[LoadedConfig]
    problems: list[ConfigProblem]


def check_config_files(paths: Sequence[str | Path]) -> ConfigReport:
    """Load and check files; unreadable ones become problems, never exceptions."""
    configs: list[LoadedConfig] = []
    problems: list[ConfigProblem] = []
    for path in paths:
        try:
            config = load_config(path)
        except ConfigLoadError as exc:
            problems.append(exc.problem)
            continue
        configs.append(config)
        found = schema_problems(config)
        problems += found
        problems += cross_field_problems(config)  # with prime-rl's defaults where a key is misspelt
    if len(configs) > 1:
        problems += split_run_problems(configs)
    return ConfigReport(configs, problems)
