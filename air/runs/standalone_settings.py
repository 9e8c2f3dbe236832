"""What ``air standalone`` is asked to run: its settings, typed, and the arguments its env is loaded
with. Light on purpose (pydantic and the policies' names): the command line builds its options from these
fields and checks them before importing the env's stack."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from air.policies.scripted import SPECS
from air.runs.run_folder import RunFolder, open_run_folder
from air.serving.models.served_model import MODEL_SPECS

SIMPLE_ENV_TASK = "dial"  # simple_env.TASK (a test checks they agree): its one game, no task root


def parse_env_arg(item: str) -> tuple[str, Any]:
    """``KEY=JSON``. A value that starts like JSON (brackets, braces, quotes) must be valid JSON: a typo
    there is an error, not silently a string; any other value that is not JSON is a plain string."""
    key, sep, value = item.partition("=")
    if not sep or not key.strip():
        raise ValueError(f"{item!r}: expected KEY=VALUE")
    try:
        return key.strip(), json.loads(value)
    except json.JSONDecodeError as exc:
        if value.lstrip()[:1] in ("[", "{", '"'):
            raise ValueError(f"{item!r}: the value is not valid JSON ({exc})") from None
        return key.strip(), value


class StandaloneSettings(BaseModel):
    """The one declaration of `air standalone`'s options (air.cli.options makes a flag of each field):
    each description is the option's --help line, each default its default."""

    model_config = ConfigDict(extra="forbid")

    tasks: list[str] | None = Field(
        default=None,
        description=f"a task (repeatable); default: laneMerge (simple_env: {SIMPLE_ENV_TASK})",
        json_schema_extra={"flag": "--task"},
    )
    task_root: str | None = Field(
        default=None, description="an MLGym checkout; default: $MLGYM_ROOT, else the built-in tasks"
    )
    env: str = Field(default="air_mlgym", description="env id: air_mlgym, or simple_env (no Docker)")
    steps: int = Field(default=10, ge=1, description="steps to run")
    batch_size: int = Field(default=8, ge=1, description="rollouts per step")
    rollouts_per_example: int = Field(default=4, ge=1, description="group size (rollouts of one example)")
    max_turns: int = Field(default=10, ge=1, description="model replies per rollout")
    policy: str = Field(
        default="noisy",
        description=f"agent when no --base-url is given: scripted ({', '.join(SPECS)}) or a model on this CPU "
        f"({', '.join(MODEL_SPECS)}; smollm2: SmolLM2-135M-Instruct, prepared once from PyPI)",
    )
    base_url: str | None = Field(
        default=None, description="OpenAI-compatible endpoint (.../v1); default: the scripted agent"
    )
    model: str | None = Field(default=None, description="model name at the endpoint; default: 'default'")
    vllm_model: str | None = Field(
        default=None,
        description="the scripted agent's server answers like vLLM serving MODEL_DIR",
        json_schema_extra={"metavar": "MODEL_DIR"},
    )
    prime_rl: str | None = Field(
        default=None,
        description="a prime-rl install whose venv has vLLM (install_prime_rl.sh --cpu): a model (smollm2, "
        "model:DIR) is served by its inference server; default: $PRIME_RL_DIR, else air's own engine",
        json_schema_extra={"metavar": "DIR"},
    )
    api_key_var: str = Field(default="OPENAI_API_KEY", description="env var holding the endpoint's key")
    temperature: float = Field(default=1.0, description="sampling temperature")
    max_tokens: int | None = Field(default=None, description="most tokens per reply; default: the endpoint's")
    model_timeout: float = Field(
        default=180.0,
        gt=0,
        description="seconds one model request may take (one retry): a hung endpoint fails the rollout in minutes; "
        "with a model on this CPU (smollm2, model:DIR), seconds it may go without progress (slow is not hung)",
        json_schema_extra={"metavar": "S"},
    )
    seed: int = Field(default=0, description="seed of the env and of the scripted agent")
    output_dir: str | None = Field(
        default=None, description="the run's folder, new or empty; default: outputs/standalone/<time>-<id>"
    )
    overwrite: bool = Field(
        default=False, description="replace the run already in --output-dir (only a run's own files)"
    )
    env_args: dict[str, Any] = Field(
        default_factory=dict,
        description="extra env argument, repeatable: a JSON value, or a bare word taken as a string",
        json_schema_extra={"flag": "--env-arg", "metavar": "KEY=JSON", "repeat": True},
    )

    @field_validator("env_args", mode="before")
    @classmethod
    def _env_args_from_the_command_line(cls, value: Any) -> Any:
        """--env-arg KEY=JSON, once per argument: a list of those strings is read into the mapping."""
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            return dict(parse_env_arg(item) for item in value)
        return value

    @model_validator(mode="after")
    def _tasks_of_the_env(self) -> StandaloneSettings:
        if self.env == "simple_env":
            if self.tasks not in (None, [SIMPLE_ENV_TASK]):
                raise ValueError(f"simple_env has one task, {SIMPLE_ENV_TASK!r}; it cannot run {', '.join(self.tasks)}")
            if self.task_root:
                raise ValueError("simple_env has no task root; leave out task_root")
            self.tasks = [SIMPLE_ENV_TASK]
        elif self.tasks is None:
            self.tasks = ["laneMerge"]
        return self

    @model_validator(mode="after")
    def _vllm_model_needs_the_scripted_server(self) -> StandaloneSettings:
        if self.vllm_model and self.base_url:
            raise ValueError("vllm_model serves the scripted agent; it cannot be combined with base_url")
        return self

    @model_validator(mode="after")
    def _groups_divide_batch(self) -> StandaloneSettings:
        if self.batch_size % self.rollouts_per_example:
            raise ValueError(
                f"batch_size ({self.batch_size}) must be divisible by rollouts_per_example "
                f"({self.rollouts_per_example}), as in prime-rl"
            )
        return self

    def open_run_folder(self) -> RunFolder:
        """Claim this run's folder (see ``air.runs.run_folder``); RunFolderError if it cannot be ours."""
        return open_run_folder(self.output_dir, base=Path("outputs", "standalone"), overwrite=self.overwrite)

    def env_arguments(self, out: Path) -> dict[str, Any]:
        """The env's ``load_environment`` arguments for a run writing into ``out``; --env-arg wins."""
        args: dict[str, Any] = {"max_turns": self.max_turns, "seed": self.seed}
        if self.env == "air_mlgym":
            args.update(task_configs=self.tasks, save_trajectories=True, trajectory_dir=str(out / "trajectories"))
            if self.task_root:
                args["task_root"] = self.task_root
        args.update(self.env_args)
        return args
