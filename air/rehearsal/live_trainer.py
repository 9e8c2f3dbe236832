"""``air rehearse`` with ``--trainer``: prime-rl's own trainer in place of the stand-in, live.

The trainer config is what prime-rl's own ``RLConfig`` derives from the same TOML (LoRA and optimizer as
configured), changed only where the rehearsal must: the tiny model, the rehearsal's folder, ``--steps``,
no W&B, and on a machine without CUDA what makes a CPU step fast (``air_prime_rl.classic.trainer``,
``air_prime_rl.v1.trainer`` in prime_rl_side/). It starts the way ``rl`` starts it, under
``torch.distributed.run`` with one process, and measures each step into ``trainer-steps.jsonl``. The
orchestrator waits for its broadcasts as in a real run, and the server loads each one (prime-rl's vLLM by its
own routes, or air's server: ``PolicyServer(load_broadcasts=True)``).

On the CPU the orchestrator's batch is cut to at most ``CPU_GROUPS`` groups (beside the orchestrator and
the containers on 2 cores, a step of ``rl_2gpu``'s 16 rollouts takes about a minute of compute, two groups
10-30 s); the report says so (``TrainerRun.sizing``).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air.rehearsal.errors import RehearsalError
from air.rehearsal.launch import Launched, count_lines, entry_env, run_entry
from air.rehearsal.settings import RehearsalSettings
from air.rehearsal.trainer_report import TrainerRun, broadcast_loads, fixed_sample, latest_broadcast, read_steps

ENTRIES = {"classic": "air_prime_rl.classic.trainer", "v1": "air_prime_rl.v1.trainer"}  # prime_rl_side/
PROBE = "trainer-steps.jsonl"
CPU_GROUPS = 2  # groups per step on the CPU: two, so that one group with equal rewards still leaves a gradient


def trainer_device(python: Path, generation: str, root: Path) -> str:
    """Where prime-rl's venv would train: "cuda" when its torch sees a GPU, else "cpu". Its trainer must
    import there (it is not part of the orchestrator's install), else the fix is named before any start."""
    probe = (
        "import torch, prime_rl.trainer.rl.train, air_prime_rl.cpu_torch\n"
        "print('cuda' if torch.cuda.is_available() else 'cpu')"
    )
    try:
        done = subprocess.run(
            [str(python), "-c", probe], capture_output=True, text=True, timeout=600, env=entry_env(), check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise RehearsalError(f"cannot ask {python} whether prime-rl's trainer imports ({exc})") from None
    device = done.stdout.strip().splitlines()[-1:] or [""]
    if done.returncode != 0 or device[0] not in ("cuda", "cpu"):
        commit = " --commit 559b447" if generation == "v1" else ""
        last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise RehearsalError(
            f"prime-rl's trainer does not import in {python} ({last}); --trainer needs its packages too: "
            f"bash scripts/install_prime_rl.sh --cpu-trainer{commit} {root}"
        )
    return device[0]


def cpu_batch(batch_size: int | None, group_size: int) -> tuple[int | None, str | None]:
    """The batch a CPU step can afford, and the report's note when it differs from the config's."""
    wanted = CPU_GROUPS * max(group_size, 1)
    if batch_size is not None and batch_size <= wanted:
        return batch_size, None
    was = "the config's" if batch_size is None else f"{batch_size}"
    return wanted, (
        f"batch {was} -> {wanted} rollouts ({CPU_GROUPS} groups of {group_size}): the trainer runs on the CPU, "
        "where a step of a full batch takes minutes; on a GPU the config's batch is kept"
    )


def trainer_overrides(model_dir: Path, output_dir: Path, steps: int, device: str, out: Path) -> dict[str, Any]:
    """What the trainer entries change in prime-rl's derived config (and nothing else). The trainer gets a
    copy of the tiny model: prime-rl writes a converted copy of the weights into the folder it loads."""
    copy = out / "trainer-model"
    shutil.copytree(model_dir, copy, ignore=shutil.ignore_patterns("prime"))
    return {"model_dir": str(copy), "output_dir": str(output_dir), "max_steps": steps, "device": device}


def derive_trainer_config(
    python: Path,
    generation: str,
    source: Path,
    out: Path,
    run: TrainerRun,
    *,
    model_dir: Path,
    output_dir: Path,
    steps: int,
    timeout: float,
) -> Path:
    """The trainer's config as prime-rl derives it (classic: from the rl TOML; v1: the ``trainer.json``
    its ``write_subconfigs`` wrote), with the rehearsal's overrides (:func:`trainer_overrides`) applied in
    prime-rl's venv."""
    overrides_file = out / "trainer-overrides.json"
    overrides = trainer_overrides(model_dir, output_dir, steps, run.device, out)
    overrides_file.write_text(json.dumps(overrides, indent=2))
    if generation == "classic":
        config, command = out / "trainer.toml", "derive"
    else:
        config, command = out / "configs" / "trainer-rehearsal.json", "adapt"
    run_entry(
        python,
        ["-m", ENTRIES[generation], command, str(source), str(overrides_file), str(config)],
        out,
        f"prime-rl could not derive its trainer's config from {source}",
        timeout,
    )
    return config


def start_trainer(python: Path, generation: str, config: Path, out: Path, owner: Path) -> Launched:
    """prime-rl's trainer as ``rl`` starts it (torchrun, one process), measured into ``out/PROBE``."""
    command = [
        str(python),
        "-m",
        "torch.distributed.run",
        "--standalone",  # a free rendezvous port of its own, as rl's get_free_port
        "--nproc-per-node=1",
        "-m",
        ENTRIES[generation],
        "train",
        str(config),
        str(out / PROBE),
    ]
    env = {**entry_env(), "PYTHONUNBUFFERED": "1", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"}
    return Launched("trainer", command, out, out / "logs" / "trainer.log", owner, env)


@dataclass
class TrainedSample:
    """One sample a batch handed the trainer: its tokens, its loss mask, whether it has a gradient."""

    step: int
    token_ids: list[int]
    mask: list[bool]
    advantage_nonzero: bool


def finish_trainer_run(
    run: TrainerRun,
    probe: Path,
    run_dir: Path,
    model_dir: Path,
    samples: list[TrainedSample],
    weight_updates: list[Any],
) -> list[dict[str, Any]]:
    """Fill ``run`` from the trainer's step lines, the server's record of the weight routes, the
    batches and the last broadcast (the fixed sample: the first trained sample of the first batch); returns
    the trainer's lines in the shape the report's step timing reads (``received_at``: when the step's batch
    was done)."""
    from air.serving.runtime.broadcast_loading import BroadcastLoadError

    run.broadcasts_loaded, run.broadcast_failures = broadcast_loads(weight_updates)
    run.steps = read_steps(probe)
    run.steps_with_gradient = sorted({sample.step for sample in samples if sample.advantage_nonzero})
    trained = sorted((s for s in samples if any(s.mask[1:])), key=lambda s: s.step)
    broadcast = latest_broadcast(run_dir)
    if trained and broadcast is not None:
        first = trained[0]
        try:
            run.fixed_sample = fixed_sample(model_dir, broadcast, first.step, first.token_ids, first.mask)
        except BroadcastLoadError as exc:
            run.broadcast_failures.append(str(exc))
    return [{"step": step.step, "received_at": step.finished_at} for step in run.steps if step.finished_at]


def wait_for_training(
    orchestrator: Launched,
    trainer: Launched,
    others: list[Launched],
    probe: Path,
    settings: RehearsalSettings,
    say: Callable[[str, int, int], None],
    weight_updates: list[Any] | None = None,
) -> None:
    """Until both the orchestrator and the trainer have exited (the trainer trains on the last batch after
    the orchestrator is done), with the trainer's finished steps as progress. Whichever fails first, a
    helper that dies, a broadcast the server could not load (``weight_updates``: the server's
    record; the orchestrator would retry it or die without the reason), or the deadline raises with the
    culprit's log."""
    deadline = time.monotonic() + settings.timeout_s
    while True:
        say("steps", count_lines(probe), settings.steps)
        failed = next((u for u in weight_updates or [] if u.loaded is False), None)
        if failed is not None:
            raise RehearsalError(f"the server could not load the trainer's broadcast: {failed.error}")
        for process in (orchestrator, trainer, *others):
            status = process.exited()
            if status not in (None, 0):
                raise RehearsalError(
                    f"{process.name} exited with status {status} after {count_lines(probe)} of {settings.steps} "
                    f"trainer steps; its log: {process.log}\n{process.tail()}"
                )
        if orchestrator.exited() == 0 and trainer.exited() == 0:
            say("steps", count_lines(probe), settings.steps)  # the last step, written just before the trainer exited
            return
        if time.monotonic() > deadline:
            late = trainer if orchestrator.exited() == 0 else orchestrator
            raise RehearsalError(
                f"the {late.name} did not finish {settings.steps} steps in {settings.timeout_s:.0f} s "
                f"({count_lines(probe)} trained); its log: {late.log}\n{late.tail()}"
            )
        time.sleep(1.0)


__all__ = [
    "CPU_GROUPS",
    "PROBE",
    "TrainedSample",
    "cpu_batch",
    "finish_trainer_run",
    "derive_trainer_config",
    "start_trainer",
    "trainer_device",
    "trainer_overrides",
    "wait_for_training",
]
