"""``air rehearse``: a training run's whole data path on this machine, before any GPU is booked.

prime-rl's real orchestrator (its own entry point, its forked env workers, the pinned verifiers) runs
``air_mlgym`` rollouts in real containers against :class:`air.inference.server.PolicyServer` answering like
vLLM serving a tiny model (token ids, logprobs), with the config's envs, env args, batch, group size and
trajectory strategy. A stand-in trainer (``orchestrator_entry.stand_in_trainer``) publishes only what the
orchestrator waits for. Then the batches it handed the trainer are read back (:mod:`.batches`).

Changed from the config, and only this: the client points at the scripted server, ``model.name`` at the
tiny model, ``max_steps`` is ``--steps``, outputs go to the rehearsal's folder (trajectories too), and
what needs a network or a trainer is dropped (W&B: metrics are captured locally instead; prime's
monitor; checkpoints; evals). Refused with the reason: NCCL weight broadcast, a teacher model, env ids
that prime-rl would install from the hub.
"""

from __future__ import annotations

import json
import os
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from air.rehearsal.batches import BatchFigures, BatchFormatError, figures, read_batch
from air.rehearsal.checks import check_docker, check_envs_load, find_orchestrator_python
from air.rehearsal.errors import RehearsalError
from air.rehearsal.launch import (
    Launched,
    commit_of,
    entry_env,
    mean_of,
    new_output_folder,
    read,
    read_episodes,
    reap_containers,
    run_entry,
    tiny_model,
    wait_for_steps,
)
from air.rehearsal.live_trainer import (
    PROBE,
    classic_samples,
    cpu_batch,
    derive_trainer_config,
    finish_trainer_run,
    start_trainer,
    trainer_device,
    wait_for_training,
)
from air.rehearsal.report import RehearsalReport, report_from
from air.rehearsal.trainer_report import TrainerRun
from air.training.config_v1 import detect_generation

DROPPED = ("wandb", "prime_monitor", "ckpt", "eval", "heartbeat")
ENV_DROPPED = ("env_gpu",)  # task containers run without GPUs here; the data path is the same
ENTRY = "air.rehearsal.orchestrator_entry"


@dataclass
class RehearsalSettings:
    config: Path
    steps: int = 3
    prime_rl: str | None = None
    policy: str = "noisy"
    output: Path | None = None
    model_dir: Path | None = None
    timeout_s: float = 1800.0
    seed: int = 0
    external_env_servers: dict[str, str] = field(default_factory=dict)  # v1: source name -> serve.address
    trainer: bool = False  # prime-rl's own trainer instead of the stand-in (live_trainer)


@dataclass
class PlannedConfig:
    path: Path
    strategy: str
    group_size: int
    batch_size: int
    max_model_len: int | None
    dropped: list[str]
    envs: list[dict[str, Any]]

    @property
    def env_images(self) -> list[str]:
        """The images the envs name ("" for the recipe's tag)."""
        return sorted({str(env.get("args", {}).get("image") or "") for env in self.envs})


def read_config(path: Path) -> dict[str, Any]:
    try:
        return tomllib.loads(path.read_text())
    except OSError as exc:
        raise RehearsalError(f"cannot read {path}: {exc.strerror}") from exc
    except tomllib.TOMLDecodeError as exc:
        raise RehearsalError(f"{path} is not valid TOML: {exc}") from exc


def plan_config(path: Path, raw: dict[str, Any] | None = None) -> PlannedConfig:
    """Read the combined config for what the rehearsal must know or cannot honour (prime-rl's own
    validation comes later, in its venv)."""
    raw = read_config(path) if raw is None else raw
    orchestrator = raw.get("orchestrator", {})
    if orchestrator.get("teacher_model") or raw.get("teacher_model"):
        raise RehearsalError(f"{path}: a teacher model needs a second inference server; the rehearsal has none")
    broadcast = raw.get("weight_broadcast", {}).get("type") or orchestrator.get("weight_broadcast", {}).get("type")
    if broadcast == "nccl":
        raise RehearsalError(f"{path}: weight_broadcast type 'nccl' needs GPUs; use 'filesystem' to rehearse")
    transport = orchestrator.get("rollout_transport", {}).get("type", "filesystem")
    if transport != "filesystem":
        raise RehearsalError(f"{path}: rollout_transport {transport!r}: the stand-in trainer reads batches from files")
    envs = orchestrator.get("env", [])
    if not envs:
        raise RehearsalError(f"{path}: no [[orchestrator.env]]: nothing to rehearse")
    hub_ids = [env.get("id", "") for env in envs if "/" in env.get("id", "")]
    if hub_ids:
        raise RehearsalError(
            f"{path}: env ids {hub_ids} would be installed from the Prime hub; the rehearsal is offline"
        )
    dropped = [key for key in DROPPED if key in raw or key in orchestrator]
    dropped += sorted(
        {f"env_gpu of {env.get('name', env.get('id'))}" for env in envs if env.get("args", {}).get("env_gpu")}
    )
    return PlannedConfig(
        path=path,
        strategy=orchestrator.get("trajectory_strategy", "interleaved"),
        group_size=int(orchestrator.get("rollouts_per_example", 1)),
        batch_size=int(orchestrator.get("batch_size", 128)),
        max_model_len=raw.get("max_model_len") or raw.get("seq_len") or orchestrator.get("seq_len"),
        dropped=dropped,
        envs=envs,
    )


def rehearse(settings: RehearsalSettings, progress: Callable[[str, int, int], None] | None = None) -> RehearsalReport:
    """Run the rehearsal; ``progress(what, done, total)`` hears about set-up stages and finished steps.
    The config's generation picks the path: prime-rl c87c19b (classic) or today's (v1, env servers)."""
    say = progress or (lambda what, done, total: None)
    path = settings.config.resolve()
    raw = read_config(path)
    if detect_generation(raw) == "v1":
        from air.rehearsal.v1 import rehearse_v1

        return rehearse_v1(settings, path, raw, say)
    if settings.external_env_servers:
        raise RehearsalError(f"{path} is a classic config: prime-rl c87c19b has no env servers to place elsewhere")
    return rehearse_classic(settings, path, raw, say)


def rehearse_classic(settings: RehearsalSettings, path: Path, raw: dict[str, Any], say) -> RehearsalReport:
    from air.inference.server import PolicyServer

    plan = plan_config(path, raw)
    python, root = find_orchestrator_python(settings.prime_rl, "classic", say=say, timeout_s=settings.timeout_s)
    check_docker(plan.env_images)
    check_envs_load(plan.envs, ENV_DROPPED)
    run = TrainerRun(device=trainer_device(python, "classic", root)) if settings.trainer else None
    out = new_output_folder(settings.output)
    run_dir = out / "run_default"
    run_dir.mkdir(parents=True)
    model_dir = tiny_model(settings.model_dir, say)
    with PolicyServer(
        settings.policy,
        vllm_model=model_dir,
        max_model_len=plan.max_model_len,
        seed=settings.seed,
        load_broadcasts=settings.trainer,
    ) as server:
        overrides = {
            "client": {"base_url": [server.base_url]},
            "model": {"name": server.model_name},
            "max_steps": settings.steps,
            "output_dir": str(run_dir),
            "_drop": list(DROPPED),
            "_env_args": {"trajectory_dir": str(out / "trajectories"), "run_id": f"rehearse-{os.getpid()}"},
            "_env_drop": list(ENV_DROPPED),
        }
        if run is not None and run.device == "cpu":
            batch_size, run.sizing = cpu_batch(plan.batch_size, plan.group_size)
            overrides["batch_size"] = batch_size
        orch_toml = derive_config(python, plan.path, overrides, out, settings.timeout_s)
        trainer_config = None
        if run is not None:  # the trainer is given the parent of run_default/, as rl gives it
            trainer_config = derive_trainer_config(
                python,
                "classic",
                plan.path,
                out,
                run,
                model_dir=model_dir,
                output_dir=out,
                steps=settings.steps,
                timeout=settings.timeout_s,
            )
        started = time.time()
        run_orchestrator(python, orch_toml, out, settings, say, trainer_config, server.weight_updates)
        elapsed = time.time() - started
        updates = list(server.weight_updates)
    report = build_report(plan, settings, out, model_dir, elapsed, updates, launched_at=started, run=run)
    report.prime_rl_commit = commit_of(root)
    return report


def derive_config(python: Path, config: Path, overrides: dict[str, Any], out: Path, timeout: float = 1800.0) -> Path:
    overrides_file, orch_toml = out / "overrides.json", out / "orchestrator.toml"
    overrides_file.write_text(json.dumps(overrides, indent=2))
    command = ["-m", ENTRY, "derive", str(config), str(overrides_file), str(orch_toml)]
    run_entry(python, command, out, f"prime-rl could not turn {config} into an orchestrator config", timeout)
    return orch_toml


def run_orchestrator(
    python: Path,
    orch_toml: Path,
    out: Path,
    settings: RehearsalSettings,
    say,
    trainer_config: Path | None = None,
    weight_updates: list | None = None,
) -> None:
    """The orchestrator and its env workers share a session; workers outlive a crashed orchestrator,
    so the whole session is stopped, and dead processes' containers reaped, whatever happens. With a
    ``trainer_config``, prime-rl's trainer runs beside it instead of the stand-in thread."""
    trainer_kind = "stand-in" if trainer_config is None else "none"
    command = [str(python), "-m", ENTRY, "run", str(orch_toml), str(out / "metrics.jsonl"), str(settings.steps)]
    launched = [
        Launched(
            "orchestrator", [*command, trainer_kind], out, out / "orchestrator.stdout", settings.config, entry_env()
        )
    ]
    try:
        if trainer_config is None:
            wait_for_steps(launched[0], [], out / "trainer.jsonl", settings, say)
        else:
            launched.append(start_trainer(python, "classic", trainer_config, out, settings.config))
            wait_for_training(launched[0], launched[1], [], out / PROBE, settings, say, weight_updates)
    finally:
        for process in reversed(launched):
            process.stop(grace=10.0)
        reap_containers()


def build_report(
    plan: PlannedConfig,
    settings: RehearsalSettings,
    out: Path,
    model_dir: Path,
    elapsed: float,
    weight_updates: list,
    *,
    launched_at: float,
    run: TrainerRun | None = None,
) -> RehearsalReport:
    from transformers import AutoTokenizer

    run_dir = out / "run_default"
    batches = []
    for step in range(settings.steps):
        path = run_dir / "rollouts" / f"step_{step}" / "rollouts.bin"
        try:
            batches.append(read_batch(path)[1])
        except (OSError, BatchFormatError) as exc:
            raise RehearsalError(f"cannot read the batch of step {step}: {exc}") from exc
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    special = {tokenizer.convert_tokens_to_ids(token) for token in ("<|im_start|>", "<|endoftext|>")}
    batch: BatchFigures = figures(batches, plan.strategy, plan.group_size, special, plan.batch_size)
    if run is None:
        trainer = [json.loads(line) for line in read(out / "trainer.jsonl").splitlines() if line.strip()]
    else:
        trainer = finish_trainer_run(run, out / PROBE, run_dir, model_dir, classic_samples(batches), weight_updates)
    logged = [json.loads(line) for line in read(out / "metrics.jsonl").splitlines() if line.strip()]
    step_logs = [entry for entry in logged if "reward/mean" in entry or "progress/samples" in entry]
    return report_from(
        batch,
        trainer,
        elapsed,
        launched_at,
        read_episodes(out / "trajectories"),
        config=str(plan.path),
        output_dir=str(out),
        steps_requested=settings.steps,
        trajectory_strategy=plan.strategy,
        weight_updates=len(weight_updates),
        env_metrics=mean_of(step_logs, lambda key: key.startswith("metrics/")),
        orchestrator_metrics=mean_of(step_logs, lambda key: key in ORCHESTRATOR_KEYS),
        dropped=plan.dropped,
        trainer_run=run,
    )


ORCHESTRATOR_KEYS = (
    "reward/mean",
    "error/mean",
    "num_turns/mean",
    "seq_len/mean",
    "is_truncated/mean",
    "batch/solve_none",
    "batch/solve_all",
    "time/step",
)


__all__ = ["RehearsalError", "RehearsalReport", "RehearsalSettings", "plan_config", "rehearse"]
