"""What ``air standalone`` can check before it imports the env's stack (verifiers, openai, datasets: a
minute on a loaded machine) or starts a container: the env id, the env's arguments against the model
its ``load_environment`` validates them with, and the task names against the task root."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ValidationError

from air.env.settings import MLGymEnvSettings, env_settings_problems, said_with_input
from air.env.simple_env_settings import SimpleEnvSettings
from air.runs.standalone_settings import StandaloneSettings
from air.tasks.config import TaskError
from air.tasks.loader import find_task_config, resolve_task_root
from air.tasks.names import did_you_mean

OUR_ENVS: dict[str, type[BaseModel]] = {"air_mlgym": MLGymEnvSettings, "simple_env": SimpleEnvSettings}


class StandaloneCheckError(ValueError):
    """An argument of the run is wrong: the message names the option and the fix."""


def check_before_start(settings: StandaloneSettings) -> None:
    """Raise :class:`StandaloneCheckError` for the first thing that would fail the run's start."""
    check_env_id(settings.env)
    args = settings.env_arguments(Path("outputs"))  # the folder does not matter to any check here
    check_env_args(settings.env, args)
    if settings.env == "air_mlgym":
        check_tasks(args.get("task_configs") or [], args.get("task_root"))


def check_env_id(env_id: str) -> None:
    if env_id in OUR_ENVS:
        return
    module = env_id.replace("-", "_").split("/")[-1]  # as verifiers' load_environment names the module
    try:
        found = importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        found = False
    if not found:
        guess = did_you_mean(env_id, OUR_ENVS)
        hint = f"did you mean {guess}?" if guess else f"use {' or '.join(OUR_ENVS)}, or install the env's package"
        raise StandaloneCheckError(f"--env {env_id}: no such env (no module {module!r} is installed); {hint}")


def check_env_args(env_id: str, args: dict[str, Any]) -> None:
    """The env's arguments as its own ``load_environment`` will validate them (only ours are known)."""
    model = OUR_ENVS.get(env_id)
    if model is None:
        return
    problems = env_settings_problems(args) if model is MLGymEnvSettings else _problems(model, args)
    if problems:
        said = "; ".join(f"{key}: {message}" for key, message in problems)
        raise StandaloneCheckError(f"--env-arg: {env_id} would refuse its arguments: {said}")


def check_tasks(names: list[str], task_root: str | None) -> None:
    try:
        root = resolve_task_root(task_root)
        for name in names:
            find_task_config(name, root)
    except TaskError as exc:
        raise StandaloneCheckError(str(exc)) from None


def _problems(model: type[BaseModel], args: dict[str, Any]) -> list[tuple[str, str]]:
    try:
        model.model_validate(args)
    except ValidationError as exc:
        problems = []
        for err in exc.errors():
            key = ".".join(map(str, err["loc"])) or "(arguments)"
            if err["type"] == "extra_forbidden":
                guess = did_you_mean(str(err["loc"][-1]), model.model_fields)
                hint = f"did you mean {guess!r}?" if guess else f"known: {', '.join(sorted(model.model_fields))}"
                problems.append((key, f"unknown argument ({hint})"))
            else:
                problems.append((key, said_with_input(err)))
        return problems
    return []
