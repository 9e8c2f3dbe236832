"""What ``air standalone`` is asked to run: its settings, typed, and the arguments its env is loaded
with. Light on purpose (pydantic only): the command line checks them before importing the env's stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from air.runs.run_folder import RunFolder, open_run_folder

SIMPLE_ENV_TASK = "dial"  # simple_env.TASK (a test checks they agree): its one game, no task root


class StandaloneSettings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tasks: list[str] | None = Field(
        default=None, description="Task config names or ids (default: laneMerge; simple_env has one task, dial)."
    )
    task_root: str | None = Field(default=None, description="MLGym checkout; default $MLGYM_ROOT, else built-in.")
    env: str = Field(default="air_mlgym", description="Env id: air_mlgym, or simple_env (no Docker).")
    env_args: dict[str, Any] = Field(default_factory=dict, description="Extra load_environment arguments.")
    steps: int = Field(default=10, ge=1)
    batch_size: int = Field(default=8, ge=1, description="Rollouts per step.")
    rollouts_per_example: int = Field(default=4, ge=1, description="Group size.")
    max_turns: int = Field(default=10, ge=1)
    policy: str = Field(default="noisy", description="Scripted agent when no --base-url is given.")
    base_url: str | None = Field(default=None, description="OpenAI-compatible endpoint (…/v1).")
    vllm_model: str | None = Field(
        default=None, description="The scripted agent's server answers like vLLM serving this model directory."
    )
    model: str | None = Field(default=None, description="Model name at the endpoint.")
    api_key_var: str = Field(default="OPENAI_API_KEY", description="Env var holding the endpoint's key.")
    temperature: float = 1.0
    max_tokens: int | None = None
    model_timeout: float = Field(
        default=180.0,
        gt=0,
        description="Seconds one model request may take (tried twice).",
    )
    seed: int = 0
    output_dir: str | None = Field(default=None, description="Run folder (default: outputs/standalone/<time>-<id>).")
    overwrite: bool = Field(default=False, description="Replace the run in a non-empty output_dir.")

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
