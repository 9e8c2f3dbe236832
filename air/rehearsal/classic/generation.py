"""``air rehearse`` for prime-rl c87c19b (classic): its orchestrator and the env workers it forks.

prime-rl's real orchestrator (its own entry point, its forked env workers, the pinned verifiers) runs
``air_mlgym`` rollouts in real containers against the rehearsal's server
(:class:`air.rehearsal.generation.Served`: air's, answering like vLLM serving the tiny model, or prime-rl's
vLLM serving a model), with the config's envs, env args, batch, group size and trajectory strategy. A stand-in
trainer thread (in the orchestrator's process) publishes only what the orchestrator waits for. Then the
batches it handed the trainer are read back (:mod:`.batches`). See :mod:`.plan` for what differs from the
config."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from air.rehearsal.checks import check_docker, check_envs_load
from air.rehearsal.classic.batches import figures, read_batch, trained_samples
from air.rehearsal.classic.plan import DROPPED, ENV_DROPPED, PlannedConfig, plan_config
from air.rehearsal.errors import RehearsalError
from air.rehearsal.figures import BatchFormatError, chat_markers
from air.rehearsal.generation import Derived, ReadBack, Rehearsal, Served
from air.rehearsal.launch import Launched, entry_env, mean_of, read, reap_containers, run_entry, wait_for_steps
from air.rehearsal.live_trainer import PROBE, start_trainer, wait_for_training
from air.rehearsal.settings import RehearsalSettings

ENTRY = "air_prime_rl.classic.entry"  # in prime-rl's venv (prime_rl_side/)
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


class Classic:
    """prime-rl c87c19b (:class:`air.rehearsal.generation.Generation`)."""

    name = "classic"

    def plan(self, path: Path, raw: dict[str, Any], settings: RehearsalSettings) -> PlannedConfig:
        if settings.external_env_servers:
            raise RehearsalError(f"{path} is a classic config: prime-rl c87c19b has no env servers to place elsewhere")
        return plan_config(path, raw)

    def check(self, plan: PlannedConfig) -> None:
        check_docker(plan.env_images)
        check_envs_load(plan.envs, ENV_DROPPED)

    def derive(self, rehearsal: Rehearsal, plan: PlannedConfig, server: Served, batch_size: int | None) -> Derived:
        """The orchestrator's config as ``rl`` derives it, with the rehearsal's changes; the trainer is given
        the parent of run_default/, as rl gives it."""
        out = rehearsal.out
        run_dir = out / "run_default"
        run_dir.mkdir(parents=True)
        overrides: dict[str, Any] = {
            "client": {"base_url": [server.base_url]},
            "model": {"name": server.model_name},
            "max_steps": rehearsal.settings.steps,
            "output_dir": str(run_dir),
            "_drop": list(DROPPED),
            "_env_args": rehearsal.env_args,
            "_env_drop": list(ENV_DROPPED),
        }
        if batch_size is not None:
            overrides["batch_size"] = batch_size
        overrides_file, orch_toml = out / "overrides.json", out / "orchestrator.toml"
        overrides_file.write_text(json.dumps(overrides, indent=2))
        command = ["-m", ENTRY, "derive", str(plan.path), str(overrides_file), str(orch_toml)]
        what = f"prime-rl could not turn {plan.path} into an orchestrator config"
        run_entry(rehearsal.python, command, out, what, rehearsal.settings.timeout_s)
        return Derived(orchestrator_config=orch_toml, run_dir=run_dir, trainer_source=plan.path, trainer_output_dir=out)

    def launch(
        self,
        rehearsal: Rehearsal,
        plan: PlannedConfig,
        derived: Derived,
        trainer_config: Path | None,
        weight_updates: list,
    ) -> list[dict[str, Any]]:
        """The orchestrator and its env workers share a session; workers outlive a crashed orchestrator,
        so the whole session is stopped, and dead processes' containers reaped, whatever happens. With a
        ``trainer_config``, prime-rl's trainer runs beside it instead of the stand-in thread."""
        python, out, settings = rehearsal.python, rehearsal.out, rehearsal.settings
        trainer_kind = "stand-in" if trainer_config is None else "none"
        command = [str(python), "-m", ENTRY, "run", str(derived.orchestrator_config), str(out / "metrics.jsonl")]
        command += [str(settings.steps), trainer_kind]
        launched = [Launched("orchestrator", command, out, out / "orchestrator.stdout", settings.config, entry_env())]
        try:
            if trainer_config is None:
                wait_for_steps(launched[0], [], out / "trainer.jsonl", settings, rehearsal.say)
            else:
                launched.append(start_trainer(python, "classic", trainer_config, out, settings.config))
                wait_for_training(launched[0], launched[1], [], out / PROBE, settings, rehearsal.say, weight_updates)
        finally:
            for process in reversed(launched):
                process.stop(grace=10.0)
            reap_containers()
        return []

    def read(self, rehearsal: Rehearsal, plan: PlannedConfig, derived: Derived) -> ReadBack:
        batches = []
        for step in range(rehearsal.settings.steps):
            path = derived.run_dir / "rollouts" / f"step_{step}" / "rollouts.bin"
            try:
                batches.append(read_batch(path)[1])
            except (OSError, BatchFormatError) as exc:
                raise RehearsalError(f"cannot read the batch of step {step}: {exc}") from exc
        special, _ = chat_markers(rehearsal.model_dir)
        return ReadBack(
            figures(batches, plan.strategy, plan.group_size, special, plan.batch_size), trained_samples(batches)
        )

    def report_fields(
        self,
        rehearsal: Rehearsal,
        plan: PlannedConfig,
        derived: Derived,
        read_back: ReadBack,
        servers: list[dict[str, Any]],
    ) -> dict[str, Any]:
        logged = [json.loads(line) for line in read(rehearsal.out / "metrics.jsonl").splitlines() if line.strip()]
        step_logs = [entry for entry in logged if "reward/mean" in entry or "progress/samples" in entry]
        return {
            "trajectory_strategy": plan.strategy,
            "env_metrics": mean_of(step_logs, lambda key: key.startswith("metrics/")),
            "orchestrator_metrics": mean_of(step_logs, lambda key: key in ORCHESTRATOR_KEYS),
        }


__all__ = ["Classic"]
