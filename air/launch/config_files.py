"""prime-rl TOML configs at the pinned commit: load them (includes, kind), and validate against prime-rl's schema.

prime-rl validates its config with pydantic when a process starts, and some of its rules (seq_len,
batch divisibility) only fire after vLLM has been launched on a GPU. This module finds the same
mistakes, and the ones prime-rl never checks (GPU sets shared by inference, trainer and the task
containers; env args our ``load_environment`` rejects), before anything is started, naming the file
and the key (the cross-field rules are ``config_rules``). The schema is prime-rl's own
(``air/launch/schemas``), so a key prime-rl would reject is
rejected here too.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import jsonschema
import jsonschema.exceptions

from air.launch.config_schema import resolve_refs, schema_default, schema_for, schema_keys
from air.launch.config_v1 import Generation, detect_generation, is_env_server, schema_view

PRIME_RL_COMMIT = "c87c19ba8672"
PRIME_RL_REPO = "https://github.com/PrimeIntellect-ai/prime-rl"


ConfigKind = Literal["rl", "orchestrator", "trainer", "inference", "env-server"]


# Where a kind's settings live inside the combined `rl` config (an env server's file holds none of them).
_KIND_PREFIX = {
    "rl": "",
    "orchestrator": "orchestrator.",
    "trainer": "trainer.",
    "inference": "inference.",
    "env-server": "env-server.",
}


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
    """One env of a config: an ``[[orchestrator.env]]`` table (classic), or a source's taskset (v1)."""

    index: int
    id: str
    name: str  # what prime-rl calls it: `name`, else `id`
    args: dict[str, Any]
    table: str = "orchestrator.env"  # v1: orchestrator.train.source or orchestrator.eval.source

    @property
    def key(self) -> str:
        return f"{self.table}[{self.index}]" if self.table else ""  # "": the file is the source (an env server's)

    @property
    def args_key(self) -> str:
        """Where the env's arguments are: ``args`` of the classic table, the taskset of a v1 source."""
        if self.table == "orchestrator.env":
            return f"{self.key}.args"
        return f"{self.key}.env.taskset" if self.table else "env.taskset"


@dataclass
class LoadedConfig:
    path: Path
    kind: ConfigKind
    data: dict[str, Any]
    included: list[Path] = field(default_factory=list)  # files read through `toml_files`
    generation: Generation = "classic"  # which prime-rl it is written for (config_v1)

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
    generation = detect_generation(data)
    if kind is None and generation == "v1":  # v1: combined configs, and an env server's own
        kind = "env-server" if is_env_server(data) else "rl"
    kind = kind or detect_kind(path, data)
    return LoadedConfig(path=path, kind=kind, data=data, included=included, generation=generation)


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
    scores = {kind: len(data.keys() & schema_keys(kind)) for kind in ("orchestrator", "trainer", "inference")}
    for kind, hint in (("orchestrator", "orch"), ("trainer", "train"), ("inference", "infer")):
        if hint in path.stem.lower():
            scores[kind] += 0.5  # the file name breaks ties (orch.toml, train.toml, infer.toml)
    best = max(scores, key=lambda k: scores[k])
    if scores[best] == 0:
        return "rl"  # the schema then names what is wrong (it requires trainer and orchestrator)
    return best  # type: ignore[return-value]


def schema_problems(config: LoadedConfig) -> list[ConfigProblem]:
    """Every place the file breaks prime-rl's schema, unknown keys first, with close matches named."""
    validator = jsonschema.Draft202012Validator(schema_for(config.kind, config.generation))
    data = schema_view(config.data) if config.generation == "v1" else config.data
    problems = []
    for error in validator.iter_errors(data):
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
        allowed = sorted(resolve_refs(error.schema, config.generation).get("properties", {}))
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
    return value if value is not None else schema_default(key, config.generation)


def _default_note(config: LoadedConfig, key: str) -> str:
    prefix = _KIND_PREFIX[config.kind]
    return "" if _get(config.data, key[len(prefix) :]) is not None else " (prime-rl's default)"
