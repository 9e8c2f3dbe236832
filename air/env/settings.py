"""The arguments of ``air_mlgym.load_environment``: one typed model, checked when prime-rl loads
the env, so a typo in a TOML's ``[[orchestrator.env]] args`` fails before any GPU is touched."""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from air.env.rewards import RewardSettings
from air.env.sandbox_keys import memory_budget, sandbox_config, sandbox_key
from air.sandbox.config import SandboxConfig, parse_env_gpu


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
    env_gpu: str | None = sandbox_key("env_gpu")
    image: str | None = sandbox_key("image", default=None)
    network: bool = sandbox_key("network")
    save_trajectories: bool = Field(default=True, description="Write one JSON file per rollout.")
    trajectory_dir: str = Field(
        default="outputs/trajectories",
        description="Where trajectories go; a relative path is resolved once, at load, against the cwd.",
    )
    command_timeout: float = sandbox_key("command_timeout_s")
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
    prompt_style: Literal["full", "brief"] = Field(
        default="full",
        description="'full': every command, limit and the reply format spelled out; 'brief': the reply format "
        "and validate in a few lines (a small model's prompt, a third of the tokens).",
    )
    max_consecutive_format_errors: int = Field(
        default=3, ge=0, description="End the rollout after this many malformed replies in a row (0: never)."
    )
    seed: int = Field(
        default=0,
        description="Seed for the dataset order and, with each group's id and the evaluation secret, for the "
        "evaluators' random draws (a game's opponent).",
    )
    evaluation_seed: int | None = Field(
        default=None,
        ge=0,
        lt=2**64,
        description="One evaluation seed for every rollout (air replay passes the recorded one); "
        "default: one per group, derived from seed and the evaluation secret.",
    )
    evaluation_secret_file: str | None = Field(
        default=None,
        description="File of the secret that enters every evaluation seed (64 hex digits, readable by its owner "
        "only); default: <state>/evaluation.secret (~/.local/state/air), made on first use. The same file and seed "
        "reproduce a run's evaluations; every env node of one run must read the same one.",
    )
    pool_size: int = Field(default=4, ge=0, description="Warm containers kept ready per env process.")
    # Sandbox keys: SandboxConfig's own fields (default, bounds, checks, description), under the env's names.
    container_cpus: float = sandbox_key("cpus")
    container_memory: str = sandbox_key("memory")
    container_pids: int = sandbox_key("pids_limit")
    container_disk: str = sandbox_key("disk")
    container_max_file_size: str = sandbox_key("max_file_size")
    container_tmp: str = sandbox_key("tmp_size")
    container_shm: str = sandbox_key("shm_size")
    engine_wait: float = sandbox_key("engine_wait_s")
    run_id: str = sandbox_key("run_id", default="air")
    reward: RewardSettings = Field(default_factory=RewardSettings, description="How scores become reward.")

    @field_validator("task_configs", mode="before")
    @classmethod
    def _one_or_many(cls, value: Any) -> Any:
        return [value] if isinstance(value, str) else value

    @field_validator("env_gpu", mode="before")
    @classmethod
    def _gpu(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        parse_env_gpu(value)
        return value

    @model_validator(mode="after")
    def _memory_budget(self) -> MLGymEnvSettings:
        problem = memory_budget(self)  # /tmp and /dev/shm full must leave a shell room below the memory limit
        if problem:
            raise ValueError(problem)
        return self

    def sandbox_config(self) -> SandboxConfig:
        """The container settings of this env's rollouts, made from its sandbox keys (``sandbox_keys``)."""
        return sandbox_config(self)

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
        elif not err["loc"]:  # a check across keys (the memory budget): its message names them and their values
            problems.append((key, str(err["msg"]).removeprefix("Value error, ")))
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
