"""What a preflight is made of: its options, the context each check reads, and the rows it yields."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

from air.launch.config_files import EnvEntry, LoadedConfig
from air.launch.config_rules import env_entries

Status = Literal["pass", "warn", "fail", "n/a"]
NET_TIMEOUT_S = 3.0


@dataclass(frozen=True)
class CheckRow:
    check: str
    status: Status
    detail: str
    fix: str = ""

    def as_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class PreflightOptions:
    configs: list[Path] = field(default_factory=list)
    endpoint: str | None = None  # an inference server to probe (.../v1)
    prime_rl_dir: str | None = None
    state_dir: str | None = None  # where recorded process trees live (tests)
    nvidia_smi: str | None = None  # the executable (tests point it at a fake)


@dataclass
class PreflightContext:
    options: PreflightOptions
    configs: list[LoadedConfig] = field(default_factory=list)
    config_ok: bool = True
    failed_tasks: set[str] = field(default_factory=set)
    own_pids: set[int] = field(default_factory=set)

    @property
    def envs(self) -> list[EnvEntry]:
        entries = [e for c in self.configs for e in env_entries(c)]
        if not self.options.configs:  # no config: the env as `air standalone` would load it
            return [EnvEntry(0, "air_mlgym", "air_mlgym (defaults)", {})]
        return entries

    @property
    def our_envs(self) -> list[EnvEntry]:
        return [e for e in self.envs if e.id == "air_mlgym"]


Check = Callable[[PreflightContext], Iterator[CheckRow]]


def exit_code(rows: list[CheckRow]) -> int:
    return 1 if any(r.status == "fail" for r in rows) else 0


def rows_as_json(rows: list[CheckRow]) -> list[dict[str, Any]]:
    return [r.as_dict() for r in rows]
