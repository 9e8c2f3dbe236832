"""What must be in place before a rehearsal starts: prime-rl's orchestrator at the pin, Docker, the image."""

from __future__ import annotations

import os
import subprocess
import tomllib
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air.launch.config_files import PRIME_RL_COMMIT
from air.launch.config_v1 import V1_COMMIT
from air.launch.prime_rl import cpu_venv, find_prime_rl, same_commit
from air.rehearsal.errors import RehearsalError

INSTALLS = {
    "classic": "bash scripts/install_prime_rl.sh --orchestrator-only [DIR]",
    "v1": f"bash scripts/install_prime_rl.sh --orchestrator-only --commit {V1_COMMIT} [DIR]",
}
# With --trainer: --cpu-trainer is the orchestrator's install plus the trainer's packages (one install, not two).
TRAINER_INSTALLS = {
    "classic": "bash scripts/install_prime_rl.sh --cpu-trainer [DIR]",
    "v1": f"bash scripts/install_prime_rl.sh --cpu-trainer --commit {V1_COMMIT} [DIR]",
}
ORCHESTRATOR_MODULE = "prime_rl.orchestrator.orchestrator"
IMPORTING = "importing prime-rl's orchestrator (a fresh venv's first import can take minutes)"


def read_config(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise RehearsalError(f"cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise RehearsalError(f"{path} is not valid TOML: {exc}") from exc


def find_orchestrator_python(
    explicit: str | None,
    generation: str = "classic",
    *,
    say: Callable[[str, int, int], None] | None = None,
    timeout_s: float = 1800.0,
    trainer: bool = False,
) -> tuple[Path, Path]:
    """(the Python that runs prime-rl's orchestrator, the checkout) for a config of ``generation``
    (classic: the pinned c87c19b; v1: today's prime-rl, any commit with env servers); RehearsalError
    naming what is wrong. The import probe waits up to ``timeout_s`` (the rehearsal's own deadline),
    announced through ``say`` as the stage :data:`IMPORTING`. With ``trainer`` (``--trainer``) the install
    named is the one that has prime-rl's trainer too (``--cpu-trainer``)."""
    hint = (TRAINER_INSTALLS if trainer else INSTALLS)[generation]
    install = find_prime_rl(explicit)
    if install is None:
        raise RehearsalError(f"prime-rl not found (--prime-rl, $PRIME_RL_DIR, ~/prime-rl); install it: {hint}")
    if not (install.root / "src" / "prime_rl").is_dir():
        raise RehearsalError(f"{install.root} ({install.source}) is not a prime-rl checkout; install it: {hint}")
    commit = install.commit()
    if generation == "v1" and install.generation() != "v1":
        raise RehearsalError(
            f"the config is written for today's prime-rl (verifiers v1), but prime-rl in {install.root} is the "
            f"classic generation ({commit[:12] if commit else 'no git commit'}); "
            f"run {hint.replace('[DIR]', '<another dir>')}, or rehearse the twin config in configs/mlgym/"
        )
    if generation == "classic" and not same_commit(commit, PRIME_RL_COMMIT):
        at = commit[:12] if commit else "no git commit"
        newer = " (today's prime-rl: rehearse a config from configs/mlgym-v1/)" if install.generation() == "v1" else ""
        raise RehearsalError(
            f"prime-rl in {install.root} is at {at}, not the pinned {PRIME_RL_COMMIT}{newer}; "
            f"run {hint.replace('[DIR]', str(install.root))} to check it out"
        )
    for venv in (cpu_venv(install.root), install.root / ".venv"):  # the CPU install's, else a full install's
        python = venv / "bin" / "python"
        if python.exists():
            break
    else:
        raise RehearsalError(f"{install.root} has no venv with prime-rl's orchestrator; run {hint}")
    probe_import(python, hint, say or (lambda what, done, total: None), timeout_s)
    return python, install.root


def probe_import(python: Path, hint: str, say: Callable[[str, int, int], None], timeout_s: float) -> None:
    """``python`` imports prime-rl's orchestrator, however long a cold venv takes (up to ``timeout_s``);
    a failure, a start that fails or a wait past the bound is one RehearsalError naming the fix."""
    say(IMPORTING, 0, 1)
    try:
        probe = subprocess.run(
            [str(python), "-c", f"import {ORCHESTRATOR_MODULE}"], capture_output=True, text=True, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        raise RehearsalError(
            f"waited {timeout_s:g} s for {python} to import {ORCHESTRATOR_MODULE} and it had not finished "
            "(a fresh venv's first import compiles bytecode, which takes minutes on a busy machine or a network "
            f"file system); run it again (what was compiled is kept), warm it first with "
            f"`{python} -c 'import {ORCHESTRATOR_MODULE}'`, or pass --timeout with more seconds"
        ) from None
    except OSError as exc:
        raise RehearsalError(f"cannot start {python} ({exc.strerror or exc}); run {hint}") from None
    if probe.returncode != 0:
        last = (probe.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RehearsalError(f"{python} cannot import prime-rl's orchestrator ({last}); run {hint}")
    say(IMPORTING, 1, 1)


def check_docker(images: list[str]) -> None:
    from air.sandbox.config import SandboxConfig
    from air.sandbox.container import docker_client, require_image
    from air.sandbox.errors import SandboxError

    try:
        client = docker_client()
        for image in images or [""]:
            require_image(SandboxConfig(image=image), client)
    except SandboxError as exc:
        raise RehearsalError(f"the rollouts need Docker: {exc}") from exc


def check_envs_load(envs: list[dict], dropped_args: tuple[str, ...]) -> None:
    """Each env loads here as prime-rl will load it (``vf.load_environment(id, **args)``: no container),
    so a missing MLGym checkout or a wrong argument is named before the orchestrator starts."""
    from air.env.load import load_env

    for entry in envs:
        args = {k: v for k, v in (entry.get("args") or {}).items() if k not in dropped_args}
        name = entry.get("name") or entry.get("id")
        try:
            load_env(entry.get("id", ""), **args)
        except Exception as exc:
            cause = exc.__cause__ or exc
            hint = ""
            if entry.get("id") == "air_mlgym" and "task_root" not in args and not os.environ.get("MLGYM_ROOT"):
                hint = " (its tasks come from $MLGYM_ROOT, which is not set: point it at an MLGym checkout)"
            raise RehearsalError(f"env {name!r} ({entry.get('id')}) does not load: {cause}{hint}") from exc
