"""What both rehearsals share: the output folder, the tiny model, starting prime-rl's processes in its
venv (recorded like ``air train``'s, so ``air clean`` can stop them if the rehearsal dies) and stopping
them with every container they left."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import air
from air.launch.process_control import live_processes, stop_processes
from air.launch.process_records import ProcessRecord, forget, record_launch, save
from air.rehearsal.errors import RehearsalError
from air.rehearsal.settings import RehearsalSettings

PRIME_RL_SIDE = "prime_rl_side"  # the checkout's folder of package air_prime_rl: what runs in prime-rl's venv


def new_output_folder(explicit: Path | None) -> Path:
    out = (explicit or Path("outputs/rehearse") / time.strftime("%Y%m%d-%H%M%S")).resolve()
    if out.exists() and any(out.iterdir()):
        raise RehearsalError(f"{out} is not empty: name a new --output folder")
    out.mkdir(parents=True, exist_ok=True)
    return out


def default_model_dir() -> Path:
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "air" / "tiny-model"


def tiny_model(explicit: Path | None, say: Callable[[str, int, int], None]) -> Path:
    from air.serving.models.tiny_model import TinyModelError, write_tiny_model

    say("tiny model", 0, 1)
    try:
        model_dir = write_tiny_model(explicit or default_model_dir())
    except TinyModelError as exc:
        raise RehearsalError(str(exc)) from exc
    say("tiny model", 1, 1)
    return model_dir


def entry_env() -> dict[str, str]:
    """The environment of prime-rl's processes: offline, this checkout's ``air`` and ``air_prime_rl`` (its
    entries, installed there by install_prime_rl.sh) first on the path."""
    project = Path(air.__file__).resolve().parent.parent
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    first = [str(project), str(project / PRIME_RL_SIDE)]
    env["PYTHONPATH"] = os.pathsep.join([*first, *filter(None, [os.environ.get("PYTHONPATH")])])
    env["OPENAI_API_KEY"] = "rehearsal"  # the scripted server takes any key; prime-rl sends this one
    env["VLLM_API_KEY"] = "rehearsal"
    env["WANDB_MODE"] = "disabled"
    return env


def run_entry(python: Path, command: list[str], out: Path, what: str, timeout: float = 1800.0) -> None:
    """A short step in prime-rl's venv (deriving configs); its stderr's tail names what went wrong, and
    a start that fails or a run past ``timeout`` (the rehearsal's deadline) is one RehearsalError too."""
    try:
        done = subprocess.run(
            [str(python), *command], env=entry_env(), capture_output=True, text=True, timeout=timeout, cwd=out
        )
    except subprocess.TimeoutExpired:
        raise RehearsalError(
            f"{what}: waited {timeout:g} s for {python} {' '.join(command)} (in {out}) and it had not finished "
            "(a first import in a fresh venv compiles bytecode, which takes minutes on a busy machine); "
            "run it again (what was compiled is kept), or pass --timeout with more seconds"
        ) from None
    except OSError as exc:
        raise RehearsalError(f"{what}: cannot start {python} ({exc.strerror or exc})") from None
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-12:])
        raise RehearsalError(f"{what}:\n{tail}")


class Launched:
    """One process of prime-rl's started in its own session, its output in ``log``; recorded like
    ``air train``'s runs, so if the rehearsal dies, ``air clean`` can still stop its tree."""

    def __init__(self, name: str, command: list[str], cwd: Path, log: Path, config: Path, env: dict[str, str]) -> None:
        self.name, self.log = name, log
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("wb") as sink:
            self.process = subprocess.Popen(
                command, cwd=cwd, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.record: ProcessRecord = record_launch(self.process.pid, "rehearsal", command, cwd, config=str(config))

    def exited(self) -> int | None:
        return self.process.poll()

    def tail(self, lines: int = 25) -> str:
        return tail(self.log, lines)

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to its whole session (env workers and servers remove their containers), then SIGKILL
        to what is left; a process that outlives both stays recorded for `air clean`."""
        stop_processes(live_processes(self.record), grace=grace)
        self.process.wait()
        if live_processes(self.record):
            save(self.record)
        else:
            forget(self.record)


def wait_for_steps(
    orchestrator: Launched,
    others: list[Launched],
    trainer_log: Path,
    settings: RehearsalSettings,
    say: Callable[[str, int, int], None],
) -> None:
    """Until the orchestrator exits, with the stand-in trainer's finished steps as progress; a helper
    that dies first, the deadline, a failed exit or missing steps raise with the culprit's log."""
    deadline = time.monotonic() + settings.timeout_s
    while orchestrator.exited() is None:
        say("steps", count_lines(trainer_log), settings.steps)
        for process in others:
            if process.exited() not in (None, 0):
                raise RehearsalError(
                    f"{process.name} exited with status {process.exited()}; its log: {process.log}\n{process.tail()}"
                )
        if time.monotonic() > deadline:
            raise RehearsalError(
                f"the orchestrator did not finish {settings.steps} steps in {settings.timeout_s:.0f} s; "
                f"its log: {orchestrator.log}\n{orchestrator.tail()}"
            )
        time.sleep(1.0)
    say("steps", count_lines(trainer_log), settings.steps)
    if orchestrator.exited() != 0 or count_lines(trainer_log) < settings.steps:
        raise RehearsalError(
            f"prime-rl's orchestrator exited with status {orchestrator.exited()} after "
            f"{count_lines(trainer_log)} of {settings.steps} steps; its log: {orchestrator.log}\n{orchestrator.tail()}"
        )


def reap_containers() -> None:
    from air.sandbox.errors import SandboxError
    from air.sandbox.removal import reap_orphans

    try:
        reap_orphans()
    except SandboxError:
        pass


@dataclass
class Episodes:
    """The episodes the env ran here, from their trajectories (a cancelled one records itself too)."""

    dispatched: int = 0
    cancelled: int = 0
    first_started: float | None = None  # epoch seconds of the earliest episode's start


def read_episodes(trajectory_dir: Path) -> Episodes:
    """One pass over the run's trajectories: how many, how many cancelled, when the first began."""
    found = Episodes()
    for path in sorted(trajectory_dir.rglob("*.json")) if trajectory_dir.is_dir() else []:
        try:
            record = json.loads(path.read_text())
            status = record.get("exit_status")
        except (OSError, ValueError, AttributeError):
            continue
        found.dispatched += 1
        found.cancelled += status == "cancelled"
        try:
            began = datetime.fromisoformat(record["started_at"]).timestamp()
        except (KeyError, TypeError, ValueError):
            continue
        found.first_started = began if found.first_started is None else min(found.first_started, began)
    return found


def commit_of(root: Path) -> str:
    from air.launch.prime_rl import PrimeRlInstall

    return (PrimeRlInstall(root=root, source="--prime-rl").commit() or "")[:12]


def mean_of(entries: list[dict[str, Any]], wanted: Callable[[str], bool]) -> dict[str, float]:
    sums: dict[str, list[float]] = {}
    for entry in entries:
        for key, value in entry.items():
            if wanted(key) and isinstance(value, int | float) and not isinstance(value, bool):
                sums.setdefault(key, []).append(float(value))
    return {key: sum(values) / len(values) for key, values in sorted(sums.items())}


def count_lines(path: Path) -> int:
    return sum(1 for line in read(path).splitlines() if line.strip())


def read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def tail(path: Path, lines: int = 25) -> str:
    return "\n".join(read(path).splitlines()[-lines:])
