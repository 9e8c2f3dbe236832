"""prime-rl TOML configs at the pinned commit: load, validate against prime-rl's schema, cross-check.

prime-rl validates its config with pydantic when a process starts, and some of its rules (seq_len,
batch divisibility) only fire after vLLM has been launched on a GPU. This module finds the same
mistakes, and the ones prime-rl never checks (GPU sets shared by inference, trainer and the task
containers; env args our ``load_environment`` rejects), before anything is started, naming the file
and the key. The schema is prime-rl's own (``air/schemas``), so a key prime-rl would reject is
rejected here too.
"""

from __future__ import annotations

import difflib
import json
import tomllib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any, Literal

import jsonschema
import jsonschema.exceptions

PRIME_RL_COMMIT = "c87c19ba8672"
PRIME_RL_REPO = "https://github.com/PrimeIntellect-ai/prime-rl"
SCHEMA_PATH = Path(__file__).parent / "schemas" / "prime_rl_rl_c87c19b.schema.json"

ConfigKind = Literal["rl", "orchestrator", "trainer", "inference"]
# Which part of the combined schema each kind of file is checked against (None: the whole `rl` config).
_KIND_DEFS: dict[str, str | None] = {
    "rl": None,
    "orchestrator": "OrchestratorConfig",
    "trainer": "RLTrainerConfig",
    "inference": "InferenceConfig",
}
# Where a kind's settings live inside the combined `rl` config.
_KIND_PREFIX = {"rl": "", "orchestrator": "orchestrator.", "trainer": "trainer.", "inference": "inference."}
OUR_ENV_IDS = ("air_mlgym", "simple_env")


@dataclass(frozen=True)
class ConfigProblem:
    """One mistake in one file: where (``key`` is a dotted path) and how to fix it."""

    file: str
    key: str
    message: str
    fix: str = ""

    def __str__(self) -> str:
        where = f"{self.file}: {self.key}" if self.key else self.file
        return f"{where}: {self.message}"


@dataclass(frozen=True)
class EnvEntry:
    """One ``[[orchestrator.env]]`` table."""

    index: int
    id: str
    name: str  # what prime-rl calls it: `name`, else `id`
    args: dict[str, Any]

    @property
    def key(self) -> str:
        return f"orchestrator.env[{self.index}]"


@dataclass
class LoadedConfig:
    path: Path
    kind: ConfigKind
    data: dict[str, Any]
    included: list[Path] = field(default_factory=list)  # files read through `toml_files`

    @property
    def label(self) -> str:
        return str(self.path)


class ConfigLoadError(Exception):
    """The file cannot be read as a config at all (missing, not TOML, unknown kind)."""

    def __init__(self, problem: ConfigProblem) -> None:
        super().__init__(str(problem))
        self.problem = problem


# --------------------------------------------------------------------------- loading


def load_config(path: str | Path, kind: ConfigKind | None = None) -> LoadedConfig:
    """Read a TOML (following ``toml_files`` as prime-rl does) and tell which config it is."""
    path = Path(path).expanduser()
    data, included = _read_with_includes(path, seen=[])
    return LoadedConfig(path=path, kind=kind or detect_kind(path, data), data=data, included=included)


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ConfigLoadError(ConfigProblem(str(path), "", "no such file", "check the path")) from None
    except OSError as exc:
        raise ConfigLoadError(ConfigProblem(str(path), "", f"cannot be read: {exc}")) from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:  # its message carries line and column
        raise ConfigLoadError(ConfigProblem(str(path), "", f"is not valid TOML: {exc}", "fix the syntax")) from None


def _read_with_includes(path: Path, seen: list[Path]) -> tuple[dict[str, Any], list[Path]]:
    resolved = path.resolve()
    if resolved in seen:
        chain = " -> ".join(str(p) for p in [*seen, resolved])
        raise ConfigLoadError(ConfigProblem(str(path), "toml_files", f"includes itself ({chain})"))
    data = _read_toml(path)
    includes = data.pop("toml_files", None) or []
    merged: dict[str, Any] = {}
    read: list[Path] = []
    for name in includes:  # relative to the including file, as in prime-rl; the file itself wins
        child = path.parent / name
        child_data, child_read = _read_with_includes(child, [*seen, resolved])
        merged = _deep_merge(merged, child_data)
        read += [child, *child_read]
    return _deep_merge(merged, data), read


def _deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def detect_kind(path: Path, data: dict[str, Any]) -> ConfigKind:
    """`rl` when it has trainer/orchestrator tables or GPU lists; else guessed from its own keys."""
    rl_only = {"trainer", "orchestrator", "inference", "inference_gpu_ids", "trainer_gpu_ids", "teacher_gpu_ids"}
    if rl_only & data.keys():
        return "rl"
    scores = {kind: len(data.keys() & _schema_keys(kind)) for kind in ("orchestrator", "trainer", "inference")}
    for kind, hint in (("orchestrator", "orch"), ("trainer", "train"), ("inference", "infer")):
        if hint in path.stem.lower():
            scores[kind] += 0.5  # the file name breaks ties (orch.toml, train.toml, infer.toml)
    best = max(scores, key=lambda k: scores[k])
    if scores[best] == 0:
        return "rl"  # the schema then names what is wrong (it requires trainer and orchestrator)
    return best  # type: ignore[return-value]


# --------------------------------------------------------------------------- the schema


@cache
def load_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_PATH.read_text())


def _schema_for(kind: str) -> dict[str, Any]:
    schema = load_schema()
    name = _KIND_DEFS[kind]
    if name is None:
        return schema
    return {"$defs": schema["$defs"], "$ref": f"#/$defs/{name}"}


def _resolve(node: dict[str, Any]) -> dict[str, Any]:
    """Follow $ref and pick the object branch of `X | None` unions."""
    defs = load_schema()["$defs"]
    for _ in range(10):
        if "$ref" in node:
            node = defs[node["$ref"].rsplit("/", 1)[1]]
        elif "anyOf" in node:
            objects = [n for n in node["anyOf"] if n.get("type") != "null"]
            if len(objects) != 1:
                return node
            node = objects[0]
        else:
            return node
    return node


def _schema_keys(kind: str) -> set[str]:
    return set(_resolve(_schema_for(kind)).get("properties", {}))


def schema_default(dotted: str) -> Any:
    """prime-rl's default for a key of the combined config, e.g. ``orchestrator.batch_size``."""
    node = _resolve(load_schema())
    default: Any = None
    for part in dotted.split("."):
        branches = [_resolve(b) for b in node["anyOf"]] if "anyOf" in node else [node]  # e.g. optim: adamw | sgd
        prop = next((b["properties"][part] for b in branches if part in b.get("properties", {})), None)
        if prop is None:
            raise KeyError(dotted)
        default = prop.get("default", default.get(part) if isinstance(default, dict) else None)
        node = _resolve(prop)
    return default


def schema_problems(config: LoadedConfig) -> list[ConfigProblem]:
    """Every place the file breaks prime-rl's schema, unknown keys first, with close matches named."""
    validator = jsonschema.Draft202012Validator(_schema_for(config.kind))
    problems = []
    for error in validator.iter_errors(config.data):
        for leaf in _leaf_errors(error):
            problems.extend(_describe(config, leaf))
    unique = {(p.key, p.message): p for p in problems}
    return sorted(unique.values(), key=lambda p: (not p.message.startswith("unknown key"), p.key))


def _leaf_errors(error: jsonschema.exceptions.ValidationError) -> Iterator[jsonschema.exceptions.ValidationError]:
    """Descend `anyOf` errors into the branch that fits the value's shape (a table, not null)."""
    if error.validator in ("anyOf", "oneOf") and error.context:
        relevant = [
            e
            for e in error.context
            if not (e.validator == "type" and e.relative_schema_path and e.validator_value == "null")
        ]
        if relevant and not all(e.validator == "type" for e in relevant):
            for sub in relevant:
                if sub.validator != "type":
                    yield from _leaf_errors(sub)
            return
    yield error


def _describe(config: LoadedConfig, error: jsonschema.exceptions.ValidationError) -> list[ConfigProblem]:
    path = _dotted(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        allowed = sorted(_resolve(error.schema).get("properties", {}))
        out = []
        for key in sorted(set(error.instance) - set(allowed)):
            close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
            hint = f" (did you mean '{close[0]}'?)" if close else ""
            out.append(
                ConfigProblem(
                    config.label,
                    f"{path}.{key}" if path else key,
                    f"unknown key{hint}",
                    f"rename it to '{close[0]}'" if close else f"remove it; allowed here: {', '.join(allowed)}",
                )
            )
        return out
    if error.validator == "required":
        return [ConfigProblem(config.label, path, error.message, "add the table")]
    if error.validator == "enum":
        choices = ", ".join(repr(v) for v in error.validator_value)
        return [ConfigProblem(config.label, path, f"{error.instance!r} is not one of {choices}", "pick one of them")]
    return [ConfigProblem(config.label, path, error.message)]


def _dotted(parts: Iterable[Any]) -> str:
    out = ""
    for part in parts:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


# --------------------------------------------------------------------------- cross-field checks


def _get(data: dict[str, Any], dotted: str, default: Any = None) -> Any:
    node: Any = data
    for part in dotted.split("."):
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def effective(config: LoadedConfig, key: str) -> Any:
    """A setting as prime-rl would see it: the file's value, else prime-rl's default.

    ``key`` is written as in the combined config (``orchestrator.batch_size``); for a split file the
    prefix is dropped (``batch_size`` in orch.toml)."""
    prefix = _KIND_PREFIX[config.kind]
    if not key.startswith(prefix):
        return None
    value = _get(config.data, key[len(prefix) :])
    return value if value is not None else schema_default(key)


def _default_note(config: LoadedConfig, key: str) -> str:
    prefix = _KIND_PREFIX[config.kind]
    return "" if _get(config.data, key[len(prefix) :]) is not None else " (prime-rl's default)"


def env_entries(config: LoadedConfig) -> list[EnvEntry]:
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
    from air.sandbox import parse_env_gpu

    sets: dict[str, tuple[int, ...]] = {}
    if config.kind == "rl":
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
    if config.kind in ("rl", "orchestrator"):
        o = "orchestrator." if config.kind == "rl" else ""
        batch = effective(config, "orchestrator.batch_size")
        group = effective(config, "orchestrator.rollouts_per_example")
        if isinstance(batch, int) and isinstance(group, int) and group > 0 and batch % group:
            problems.append(
                ConfigProblem(
                    f,
                    f"{o}batch_size",
                    f"{batch}{_default_note(config, 'orchestrator.batch_size')} is not divisible by "
                    f"{o}rollouts_per_example = {group}{_default_note(config, 'orchestrator.rollouts_per_example')}",
                    f"use a multiple of {group}, e.g. {max(group, batch - batch % group)}",
                )
            )
        workers = effective(config, "orchestrator.workers_per_env")
        concurrent = effective(config, "orchestrator.max_concurrent")
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
                        "give each role its own GPUs: inference_gpu_ids, trainer_gpu_ids and env_gpu must not overlap",
                    )
                )
        if len(set(sets[a])) != len(sets[a]):
            problems.append(ConfigProblem(config.label, gpu_key(config, a), f"lists a GPU twice: {_ids(sets[a])}"))
    return problems


def gpu_key(config: LoadedConfig, role: str) -> str:
    """The key that assigns a role of ``gpu_sets`` its GPUs (what a user edits to move it)."""
    if role.startswith("env "):
        entry = next(e for e in env_entries(config) if f"env {e.name}" == role)
        return f"{_env_key(config, entry)}.args.env_gpu"
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
                    f"{_env_key(config, entry)}.name",
                    f"env name {entry.name!r} is used twice (also {_env_key(config, seen[entry.name])})",
                    "give every [[orchestrator.env]] a unique name",
                )
            )
        seen.setdefault(entry.name, entry)
        problems += [
            ConfigProblem(config.label, f"{_env_key(config, entry)}.args.{key}", message, fix)
            for key, message, fix in env_args_problems(entry.id, entry.args)
        ]
    return problems


def _env_key(config: LoadedConfig, entry: EnvEntry) -> str:
    return entry.key if config.kind == "rl" else f"env[{entry.index}]"


def env_args_problems(env_id: str, args: dict[str, Any]) -> list[tuple[str, str, str]]:
    """Check an env's args with the settings model its ``load_environment`` uses; ids not ours pass."""
    from pydantic import ValidationError

    if env_id == "air_mlgym":
        from air.env_settings import env_settings_problems

        return [(key, message, _fix_of(message)) for key, message in env_settings_problems(dict(args))]
    if env_id == "simple_env":
        from simple_env import DialSettings

        try:
            DialSettings.model_validate(args)
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
