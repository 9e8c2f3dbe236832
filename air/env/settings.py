"""The arguments of ``air_mlgym.load_environment``: one typed model, checked when prime-rl loads
the env, so a typo in a TOML's ``[[orchestrator.env]] args`` fails before any GPU is touched."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from air.env.rewards import RewardSettings
from air.sandbox.config import SandboxConfig, checked_size, parse_env_gpu


class EnvSettingsError(ValueError):
    """Invalid environment arguments; the message names every key at fault."""


class MLGymEnvSettings(BaseModel):
    """Arguments of ``load_environment`` (the ``args`` table of an ``[[orchestrator.env]]`` entry)."""

    model_config = ConfigDict(extra="forbid")

    task_configs: list[str] | None = Field(
        default=None,
        description="Tasks by config file name or id (['titanic.yaml'] or ['titanic']); "
        "default: every task of the built-in root (required for other roots).",
    )
    task_root: str | None = Field(
        default=None, description="MLGym checkout or folder in its layout; default $MLGYM_ROOT, else built-in tasks."
    )
    num_examples_per_task: int = Field(default=1, ge=1, description="Dataset rows per task.")
    max_turns: int = Field(default=20, ge=1, description="Model replies per rollout.")
    env_gpu: str | None = Field(default=None, description="GPUs for the task containers: '7' or '6,7'.")
    image: str | None = Field(default=None, description="Sandbox image; default $AIR_IMAGE, else the recipe's tag.")
    network: bool = Field(default=False, description="Give task containers a network.")
    save_trajectories: bool = Field(default=True, description="Write one JSON file per rollout.")
    trajectory_dir: str = Field(
        default="outputs/trajectories",
        description="Where trajectories go; a relative path is resolved once, at load, against the cwd.",
    )
    command_timeout: float = Field(default=60.0, gt=0, description="Seconds per command.")
    long_command_timeout: float | None = Field(
        default=None,
        gt=0,
        description="Seconds for commands whose programs include python/torchrun/accelerate/deepspeed; "
        "default: the task's training_timeout.",
    )
    evaluation_timeout: float | None = Field(
        default=None,
        gt=0,
        description="Wall-clock seconds one evaluation may take as a whole (freeze to resume); running out is a "
        "failed evaluation with the no-score penalty. Default: the task's evaluation_timeout, else 120 s for a "
        "game (Python task), 300 s for a CSV task, training_timeout for a model task.",
    )
    rollout_time_limit: float | None = Field(
        default=7200.0,
        gt=0,
        description="Wall-clock seconds a rollout may take from its start (null: no limit); a command is cut "
        "at the limit, and the next reply after it ends the episode (the workspace is still evaluated).",
    )
    observation_max_chars: int = Field(
        default=6000, ge=200, description="Longest observation shown to the model (head and tail kept)."
    )
    max_consecutive_format_errors: int = Field(
        default=3, ge=0, description="End the rollout after this many malformed replies in a row (0: never)."
    )
    seed: int = Field(
        default=0,
        description="Seed for the dataset order and, with each group's id, for the evaluators' random draws "
        "(a game's opponent): keep it to yourself where the draws must stay unpredictable.",
    )
    evaluation_seed: int | None = Field(
        default=None,
        ge=0,
        lt=2**64,
        description="One evaluation seed for every rollout (air replay passes the recorded one); "
        "default: one per group, derived from seed.",
    )
    pool_size: int = Field(default=4, ge=0, description="Warm containers kept ready per env process.")
    container_cpus: float = Field(default=2.0, gt=0, description="CPU limit per task container.")
    container_memory: str = Field(default="4g", description="Memory limit per task container (docker syntax).")
    container_pids: int = Field(default=1024, gt=16, description="Most processes (threads) in a task container.")
    container_disk: str = Field(
        default="20g",
        description="Most bytes a task container may write: the engine's quota where its storage driver can size "
        "containers (xfs with pquota, btrfs, zfs); elsewhere the container's writable size is checked every few "
        "seconds and, past it, the agent's writers are killed and its commands fail; '' for no limit.",
    )
    container_max_file_size: str = Field(
        default="4g",
        description="Largest file a task container's agent may write (a hard RLIMIT_FSIZE on its shell and the "
        "evaluation's agent-side processes); '' for no limit.",
    )
    container_tmp: str = Field(default="1g", description="Size of a task container's /tmp (tmpfs, counts as memory).")
    container_shm: str = Field(default="256m", description="Size of a task container's /dev/shm (counts as memory).")
    engine_wait: float = Field(
        default=300.0,
        ge=0,
        description="Seconds a new rollout waits for an unreachable Docker engine before the run stops.",
    )
    run_id: str = Field(default="air", description="Label on the containers of this run (for `air clean`).")
    reward: RewardSettings = Field(default_factory=RewardSettings, description="How scores become reward.")

    @field_validator("task_configs", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("container_memory", "container_disk", "container_max_file_size", "container_tmp", "container_shm")
    @classmethod
    def _size(cls, value: str, info: ValidationInfo) -> str:
        unlimited_ok = info.field_name in ("container_disk", "container_max_file_size")
        return checked_size(value, info.field_name, none_ok=unlimited_ok)

    @field_validator("env_gpu", mode="before")
    @classmethod
    def _gpu(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        parse_env_gpu(value)
        return value

    def sandbox_config(self) -> SandboxConfig:
        """The container settings of this env's rollouts: its ``container_*`` and sandbox keys, mapped once."""
        return SandboxConfig(
            image=self.image or "",
            network=self.network,
            env_gpu=self.env_gpu,
            command_timeout_s=self.command_timeout,
            cpus=self.container_cpus,
            memory=self.container_memory,
            pids_limit=self.container_pids,
            disk=self.container_disk,
            max_file_size=self.container_max_file_size,
            tmp_size=self.container_tmp,
            shm_size=self.container_shm,
            run_id=self.run_id,
            engine_wait_s=self.engine_wait,
        )

    def trajectory_path(self) -> Path:
        return Path(self.trajectory_dir).expanduser().resolve()


def parse_env_settings(kwargs: dict[str, Any]) -> MLGymEnvSettings:
    """Validate ``load_environment``'s keyword arguments, naming each bad key (and a likely fix)."""
    try:
        return MLGymEnvSettings.model_validate(kwargs)
    except ValidationError as exc:
        problems = [f"{key}: {message}" for key, message in _problems(exc)]
        raise EnvSettingsError("air_mlgym: invalid environment arguments: " + "; ".join(problems)) from None


def env_settings_problems(kwargs: dict[str, Any]) -> list[tuple[str, str]]:
    """(key, message) for every argument ``load_environment`` would reject; empty when all are fine."""
    try:
        MLGymEnvSettings.model_validate(kwargs)
    except ValidationError as exc:
        return _problems(exc)
    return []


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    problems = []
    for err in exc.errors():
        key = ".".join(str(p) for p in err["loc"]) or "(arguments)"
        if err["type"] == "extra_forbidden":
            known = list(_known_keys(err["loc"]))
            guess = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
            hint = f" (did you mean {guess[0]!r}?)" if guess else f" (known: {', '.join(sorted(known))})"
            problems.append((key, f"unknown argument{hint}"))
        else:
            problems.append((key, said_with_input(err)))
    return problems


def said_with_input(err: Any) -> str:
    """A pydantic error's message with the value at fault, said once."""
    message, got = str(err["msg"]).removeprefix("Value error, "), repr(err.get("input"))
    return message if got in message else f"{message} (got {got})"


def _known_keys(loc: tuple[Any, ...]) -> list[str]:
    model: type[BaseModel] = MLGymEnvSettings
    if len(loc) > 1 and loc[0] == "reward":
        model = RewardSettings
    return list(model.model_fields)
