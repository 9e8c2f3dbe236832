"""prime-rl's JSON schemas (shipped, Apache-2.0), one per generation: the classic pin c87c19b and today's
prime-rl (559b447, verifiers v1). Load one, resolve a config kind's part of it, and find a key's default."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

SCHEMAS = {
    "classic": Path(__file__).parent / "schemas" / "prime_rl_rl_c87c19b.schema.json",
    "v1": Path(__file__).parent / "schemas" / "prime_rl_rl_559b447.schema.json",
}
SCHEMA_PATH = SCHEMAS["classic"]


# Which part of the combined schema each kind of file is checked against (None: the whole `rl` config).
_KIND_DEFS: dict[str, str | None] = {
    "rl": None,
    "orchestrator": "OrchestratorConfig",
    "trainer": "RLTrainerConfig",
    "inference": "InferenceConfig",
}


@cache
def load_schema(generation: str = "classic") -> dict[str, Any]:
    return json.loads(SCHEMAS[generation].read_text())


def schema_for(kind: str, generation: str = "classic") -> dict[str, Any]:
    schema = load_schema(generation)
    if kind == "env-server":  # prime-rl's EnvServerConfig: a source's `env` and `serve`, with `log` and `output_dir`
        source = schema["$defs"]["TrainSourceConfig"]["properties"]
        top = {"env": source["env"], "serve": source["serve"], "log": {"$ref": "#/$defs/LogConfig"},
               "output_dir": {"type": "string"}}  # fmt: skip
        return {"$defs": schema["$defs"], "type": "object", "additionalProperties": False, "properties": top}
    name = _KIND_DEFS[kind]
    if name is None:
        return schema
    return {"$defs": schema["$defs"], "$ref": f"#/$defs/{name}"}


def resolve_refs(node: dict[str, Any], generation: str = "classic") -> dict[str, Any]:
    """Follow $ref and pick the object branch of `X | None` unions."""
    defs = load_schema(generation)["$defs"]
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


def schema_keys(kind: str, generation: str = "classic") -> set[str]:
    return set(resolve_refs(schema_for(kind, generation), generation).get("properties", {}))


def schema_default(dotted: str, generation: str = "classic") -> Any:
    """prime-rl's default for a key of the combined config, e.g. ``orchestrator.batch_size``."""
    node = resolve_refs(load_schema(generation), generation)
    default: Any = None
    for part in dotted.split("."):
        branches = [resolve_refs(b, generation) for b in node["anyOf"]] if "anyOf" in node else [node]  # adamw | sgd
        prop = next((b["properties"][part] for b in branches if part in b.get("properties", {})), None)
        if prop is None:
            raise KeyError(dotted)
        default = prop.get("default", default.get(part) if isinstance(default, dict) else None)
        node = resolve_refs(prop, generation)
    return default
