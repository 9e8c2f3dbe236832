"""``air rehearse`` for today's prime-rl (verifiers v1): its orchestrator and its env servers.

What ``uv run rl`` would do on a GPU node, minus the trainer (and vLLM, but for a model in a --cpu install):
prime-rl's ``RLConfig`` and ``write_subconfigs`` derive the orchestrator's config and one env-server config
per source (in prime-rl's venv), then prime-rl's own entry points run as separate processes, as ``rl`` starts
them: an env server per source (``prime_rl.entrypoints.env_server``, air_mlgym's v1 front inside, real
containers) and the orchestrator (``prime_rl.entrypoints.orchestrator``), against the rehearsal's server
(:class:`air.rehearsal.generation.Served`) through vLLM's token-in, token-out route. A stand-in trainer
process publishes the weights the orchestrator waits for and reads each batch with the trainer's own receiver.
A source with ``serve.address`` gets no server from the rehearsal: one started separately (another node, its
own Docker engine) answers there. Then the batches are checked against the episodes (:mod:`.batches`). See
:mod:`.plan` for what differs from the config.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

from air.fleet.folder import FleetFolder
from air.rehearsal.checks import check_docker
from air.rehearsal.errors import RehearsalError
from air.rehearsal.figures import BatchFormatError, chat_markers
from air.rehearsal.generation import Derived, ReadBack, Rehearsal, Served
from air.rehearsal.launch import Launched, entry_env, mean_of, read, reap_containers, run_entry, wait_for_steps
from air.rehearsal.live_trainer import PROBE, start_trainer, wait_for_training
from air.rehearsal.settings import RehearsalSettings
from air.rehearsal.v1.batches import read_micro_batches, read_traces, trained_samples, v1_figures
from air.rehearsal.v1.plan import (
    V1Plan,
    V1Source,
    check_external_servers,
    check_tasksets_load,
    free_port_block,
    managed_sources,
    plan_v1,
    rehearsal_config,
)

ENTRY = "air_prime_rl.v1.entry"  # in prime-rl's venv (prime_rl_side/)
ENV_SERVER = "prime_rl.entrypoints.env_server"
ORCHESTRATOR = "prime_rl.entrypoints.orchestrator"
# The file monitor's aggregate over every source and episode of a step; a seat's keys carry its name
# (air_mlgym's is ``player``).
AGGREGATE = "train/agg/all/"
ORCHESTRATOR_KEYS = ("has_error/mean", "num_turns/mean", "num_total_tokens/mean", "num_branches/mean")
SEAT_KEYS = ("reward/mean", "is_truncated/mean", "is_completed/mean")


def orchestrator_key(key: str) -> bool:
    if not key.startswith(AGGREGATE):
        return False
    rest = key[len(AGGREGATE) :]
    return rest in ORCHESTRATOR_KEYS or rest.partition("/")[2] in SEAT_KEYS


def env_metric_key(key: str) -> bool:
    parts = key.split("/")
    return key.startswith(AGGREGATE) and len(parts) > 5 and parts[4] == "metrics" and parts[-1] == "mean"


class V1:
    """prime-rl 559b447 and later (:class:`air.rehearsal.generation.Generation`)."""

    name = "v1"

    def plan(self, path: Path, raw: dict[str, Any], settings: RehearsalSettings) -> V1Plan:
        return plan_v1(path, raw, settings.external_env_servers, settings.env_nodes)

    def check(self, plan: V1Plan) -> None:
        if managed_sources(plan):
            check_docker(plan.env_images)
        check_tasksets_load(plan)
        check_external_servers(plan)

    def derive(self, rehearsal: Rehearsal, plan: V1Plan, server: Served, batch_size: int | None) -> Derived:
        out, settings = rehearsal.out, rehearsal.settings
        config = rehearsal_config(
            plan,
            steps=settings.steps,
            model_dir=rehearsal.model_dir,
            base_url=server.base_url,
            out=out,
            base_port=free_port_block(len(plan.sources)),
            env_args=rehearsal.env_args,
        )
        if batch_size is not None:
            config["orchestrator"]["batch_size"] = batch_size
        (out / "rehearsal.json").write_text(json.dumps(config, indent=2))
        configs = out / "configs"
        run_entry(
            rehearsal.python,
            ["-m", ENTRY, "derive", str(out / "rehearsal.json"), str(configs)],
            out,
            f"prime-rl could not load {plan.path} (as changed for the rehearsal: {out / 'rehearsal.json'})",
            timeout=settings.timeout_s,
        )
        orchestrator_config = json.loads((configs / "orchestrator.json").read_text())
        run_dir = Path(orchestrator_config["output_dir"])
        return Derived(
            orchestrator_config=configs / "orchestrator.json",
            run_dir=run_dir,
            trainer_source=configs / "trainer.json",
            trainer_output_dir=run_dir,
            ranks=int(orchestrator_config.get("num_train_workers") or 1),
        )

    def launch(
        self, rehearsal: Rehearsal, plan: V1Plan, derived: Derived, trainer_config: Path | None, weight_updates: list
    ) -> list[dict[str, Any]]:
        return run_processes(rehearsal, plan, derived, trainer_config, weight_updates)

    def read(self, rehearsal: Rehearsal, plan: V1Plan, derived: Derived) -> ReadBack:
        samples, traces = [], []
        for step in range(1, rehearsal.settings.steps + 1):
            step_dir = derived.run_dir / "rollouts" / f"step_{step}"
            try:
                for rank in range(derived.ranks):
                    samples += read_micro_batches(step_dir / f"rank_{rank}.bin", step)
                traces += read_traces(step_dir / "train" / "all" / "traces.jsonl", step)
            except (OSError, BatchFormatError) as exc:
                raise RehearsalError(f"cannot read the batch of step {step}: {exc}") from exc
        special, tokenizer = chat_markers(rehearsal.model_dir)
        algo = (plan.raw.get("orchestrator") or {}).get("algo") or {}
        grpo = algo.get("type", "grpo") == "grpo" and not algo.get("length_penalty")
        decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
        figures = v1_figures(samples, traces, special, check_advantages=grpo, decode=decode)
        return ReadBack(figures, trained_samples(samples))

    def report_fields(
        self, rehearsal: Rehearsal, plan: V1Plan, derived: Derived, read_back: ReadBack, servers: list[dict[str, Any]]
    ) -> dict[str, Any]:
        logged = [json.loads(line) for line in read(derived.run_dir / "metrics.jsonl").splitlines() if line.strip()]
        stale, at_end = cancellations_logged(read(rehearsal.out / "logs" / "orchestrator.log"))
        fleets = {source.name: source for source in plan.sources if source.fleet is not None}

        def nodes_of(server: dict[str, Any]) -> dict[str, Any]:
            source = fleets.get(server["source"])
            return {"env_nodes": env_node_figures(source)} if source else {}

        by_source = read_back.figures.by_source
        return {
            "trajectory_strategy": "branches (v1 traces)",
            "env_metrics": mean_of(logged, env_metric_key),
            "orchestrator_metrics": mean_of(logged, orchestrator_key),
            "generation": "v1",
            "env_servers": [
                {**server, "rollouts": 0, "samples": 0, **by_source.get(server["source"], {}), **nodes_of(server)}
                for server in servers
            ],
            "cancelled_stale": stale,
            "cancelled_at_end": at_end,
        }


def run_processes(
    rehearsal: Rehearsal, plan: V1Plan, derived: Derived, trainer_config: Path | None, weight_updates: list
) -> list[dict[str, Any]]:
    """Env servers, the trainer (prime-rl's own with a ``trainer_config``, else the stand-in) and the
    orchestrator, until both are done; every one is stopped (and every container reaped) whatever happens."""
    python, out, settings = rehearsal.python, rehearsal.out, rehearsal.settings
    configs = derived.orchestrator_config.parent
    trainer_log = out / "trainer.jsonl"
    env = entry_env()
    launched: list[Launched] = []
    servers: list[dict[str, Any]] = []
    addresses = server_addresses(plan, configs)
    try:
        for source in plan.sources:
            servers.append({"source": source.name, "address": addresses.get(source.name, source.address)})
            if source.fleet is not None:
                servers[-1]["started_by"] = f"the rehearsal: a spreader over the env nodes of {source.fleet}"
                launched.append(start_spreader(source, settings.node_lost_after_s, out, plan.path))
                continue
            if source.external:
                servers[-1]["started_by"] = "separately (serve.address)"
                continue
            servers[-1]["started_by"] = "the rehearsal"
            server_config = configs / "envs" / "train" / f"{source.name}.json"
            command = [str(python), "-m", ENV_SERVER, "@", str(server_config)]
            log = out / "logs" / "env-servers" / f"{source.name}.log"
            launched.append(Launched(f"env server {source.name!r}", command, out, log, plan.path, env))
        if trainer_config is not None:
            trainer = start_trainer(python, "v1", trainer_config, out, plan.path)
        else:
            trainer_command = [str(python), "-m", ENTRY, "trainer", str(derived.run_dir), str(settings.steps)]
            trainer_command += [str(derived.ranks), str(trainer_log)]
            log = out / "logs" / "trainer.log"
            trainer = Launched("stand-in trainer", trainer_command, out, log, plan.path, env)
        launched.append(trainer)
        orchestrator_command = [str(python), "-m", ORCHESTRATOR, "@", str(derived.orchestrator_config)]
        orchestrator = Launched(
            "orchestrator", orchestrator_command, out, out / "logs" / "orchestrator.log", plan.path, env
        )
        helpers = list(launched)
        launched.append(orchestrator)
        if trainer_config is not None:
            env_servers = [process for process in helpers if process is not trainer]
            wait_for_training(orchestrator, trainer, env_servers, out / PROBE, settings, rehearsal.say, weight_updates)
        else:
            wait_for_steps(orchestrator, helpers, trainer_log, settings, rehearsal.say)
    finally:
        for process in reversed(launched):
            process.stop()
        reap_containers()
    return servers


def start_spreader(source: V1Source, lost_after_s: float, out: Path, config: Path) -> Launched:
    """``air fleet spread DIR --address tcp://127.0.0.1:5950`` for a source over env nodes, in this
    environment (it needs no prime-rl)."""
    command = [sys.executable, "-m", "air.cli.main", "fleet", "spread", str(source.fleet), "--address"]
    command += [str(source.address), "--source", source.name, "--lost-after", f"{lost_after_s:g}"]
    command += ["--probe-interval", f"{min(1.0, lost_after_s / 4):g}"]
    log = out / "logs" / "spreaders" / f"{source.name}.log"
    return Launched(f"spreader {source.name!r}", command, out, log, config, entry_env())


def env_node_figures(source: V1Source) -> dict[str, Any]:
    """The spreader's last figures per env node (its state, episodes running, done and failed, containers)."""
    if source.fleet is None:
        return {}
    return FleetFolder(source.fleet).figures(source.name).get("nodes", {})


def server_addresses(plan: V1Plan, configs: Path) -> dict[str, str]:
    """Where each of the rehearsal's env servers binds, as prime-rl's launcher derived it."""
    found = {}
    for source in managed_sources(plan):
        path = configs / "envs" / "train" / f"{source.name}.json"
        try:
            found[source.name] = json.loads(path.read_text())["serve"]["address"]
        except (OSError, ValueError, KeyError) as exc:
            raise RehearsalError(f"prime-rl wrote no env-server config for source {source.name!r} ({path})") from exc
    return found


# prime-rl 559b447's own words when it cancels episodes (orchestrator/dispatcher.py, orchestrator.py)
STALE_LINE = re.compile(r"Cancelled (\d+) train episodes past max_off_policy_steps")
DRAIN_LINE = re.compile(r"draining pipeline \(cancelled (\d+) in-flight")


def cancellations_logged(log: str) -> tuple[int | None, int | None]:
    """(episodes prime-rl cancelled as stale, in flight at the final drain), from its log; None where
    its log has no such line at all (another prime-rl version words it otherwise)."""
    stale = [int(m.group(1)) for m in STALE_LINE.finditer(log)]
    drained = [int(m.group(1)) for m in DRAIN_LINE.finditer(log)]
    if not stale and not drained and "draining pipeline" not in log:
        return None, None
    return sum(stale), sum(drained)


__all__ = ["V1", "cancellations_logged"]
