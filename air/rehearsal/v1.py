"""``air rehearse`` for today's prime-rl (verifiers v1): its orchestrator and its env servers.

What ``uv run rl`` would do on a GPU node, minus vLLM and the trainer: prime-rl's ``RLConfig`` and
``write_subconfigs`` derive the orchestrator's config and one env-server config per source
(:mod:`.v1_entry`), then prime-rl's own entry points run as separate processes, as ``rl`` starts them:
an env server per source (``prime_rl.entrypoints.env_server``, air_mlgym's v1 front inside, real
containers) and the orchestrator (``prime_rl.entrypoints.orchestrator``), against
:class:`air.inference.server.PolicyServer` serving the tiny model through vLLM's token-in, token-out route.
A stand-in trainer process publishes the weights the orchestrator waits for and reads each batch with
the trainer's own receiver. A source with ``serve.address`` gets no server from the rehearsal: one
started separately (another node, its own Docker engine) answers there. Then the batches are checked
against the episodes (:mod:`.v1_batches`). See :mod:`.v1_plan` for what differs from the config.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from air.rehearsal.batches import BatchFormatError
from air.rehearsal.checks import check_docker, find_orchestrator_python
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
    cpu_batch,
    derive_trainer_config,
    finish_trainer_run,
    start_trainer,
    trainer_device,
    v1_samples,
    wait_for_training,
)
from air.rehearsal.report import RehearsalReport, report_from
from air.rehearsal.trainer_report import TrainerRun
from air.rehearsal.v1_batches import V1Figures, read_micro_batches, read_traces, v1_figures
from air.rehearsal.v1_plan import (
    V1Plan,
    check_external_servers,
    check_tasksets_load,
    free_port_block,
    managed_sources,
    plan_v1,
    rehearsal_config,
)

ENTRY = "air.rehearsal.v1_entry"
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


def rehearse_v1(settings, path: Path, raw: dict[str, Any], say: Callable[[str, int, int], None]) -> RehearsalReport:
    from air.inference.server import PolicyServer

    plan = plan_v1(path, raw, settings.external_env_servers)
    python, root = find_orchestrator_python(settings.prime_rl, "v1", say=say, timeout_s=settings.timeout_s)
    if managed_sources(plan):
        check_docker(plan.env_images)
    check_tasksets_load(plan)
    check_external_servers(plan)
    run = TrainerRun(device=trainer_device(python, "v1", root)) if settings.trainer else None
    out = new_output_folder(settings.output)
    model_dir = tiny_model(settings.model_dir, say)
    with PolicyServer(
        settings.policy,
        vllm_model=model_dir,
        max_model_len=plan.seq_len,
        seed=settings.seed,
        load_broadcasts=settings.trainer,
    ) as server:
        config = rehearsal_config(
            plan,
            steps=settings.steps,
            model_dir=model_dir,
            base_url=server.base_url,
            out=out,
            base_port=free_port_block(len(plan.sources)),
            env_args={"trajectory_dir": str(out / "trajectories"), "run_id": f"rehearse-{os.getpid()}"},
        )
        if run is not None and run.device == "cpu":
            config["orchestrator"]["batch_size"], run.sizing = cpu_batch(plan.batch_size, plan.group_size)
        (out / "rehearsal.json").write_text(json.dumps(config, indent=2))
        configs = out / "configs"
        run_entry(
            python,
            ["-m", ENTRY, "derive", str(out / "rehearsal.json"), str(configs)],
            out,
            f"prime-rl could not load {path} (as changed for the rehearsal: {out / 'rehearsal.json'})",
            timeout=settings.timeout_s,
        )
        orchestrator_config = json.loads((configs / "orchestrator.json").read_text())
        trainer_config = None
        if run is not None:
            trainer_config = derive_trainer_config(
                python,
                "v1",
                configs / "trainer.json",
                out,
                run,
                model_dir=model_dir,
                output_dir=Path(orchestrator_config["output_dir"]),
                steps=settings.steps,
                timeout=settings.timeout_s,
            )
        started = time.time()
        updates = server.weight_updates
        servers = run_processes(python, plan, configs, orchestrator_config, out, settings, say, trainer_config, updates)
        elapsed = time.time() - started
        updates = list(updates)
    report = build_v1_report(
        plan,
        settings,
        out,
        model_dir,
        elapsed,
        updates,
        orchestrator_config,
        servers,
        launched_at=started,
        run=run,
    )
    report.prime_rl_commit = commit_of(root)
    return report


def run_processes(
    python: Path,
    plan: V1Plan,
    configs: Path,
    orchestrator_config: dict,
    out: Path,
    settings,
    say,
    trainer_config: Path | None = None,
    weight_updates: list | None = None,
) -> list[dict[str, Any]]:
    """Env servers, the trainer (prime-rl's own with a ``trainer_config``, else the stand-in) and the
    orchestrator, until both are done; every one is stopped (and every container reaped) whatever happens."""
    run_dir = Path(orchestrator_config["output_dir"])
    ranks = int(orchestrator_config.get("num_train_workers") or 1)
    trainer_log = out / "trainer.jsonl"
    env = entry_env()
    launched: list[Launched] = []
    servers: list[dict[str, Any]] = []
    addresses = server_addresses(plan, configs)
    try:
        for source in plan.sources:
            servers.append({"source": source.name, "address": addresses.get(source.name, source.address)})
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
            trainer_command = [str(python), "-m", ENTRY, "trainer", str(run_dir), str(settings.steps), str(ranks)]
            trainer_command.append(str(trainer_log))
            log = out / "logs" / "trainer.log"
            trainer = Launched("stand-in trainer", trainer_command, out, log, plan.path, env)
        launched.append(trainer)
        orchestrator_command = [str(python), "-m", ORCHESTRATOR, "@", str(configs / "orchestrator.json")]
        orchestrator = Launched(
            "orchestrator", orchestrator_command, out, out / "logs" / "orchestrator.log", plan.path, env
        )
        helpers = list(launched)
        launched.append(orchestrator)
        if trainer_config is not None:
            env_servers = [process for process in helpers if process is not trainer]
            wait_for_training(orchestrator, trainer, env_servers, out / PROBE, settings, say, weight_updates)
        else:
            wait_for_steps(orchestrator, helpers, trainer_log, settings, say)
    finally:
        for process in reversed(launched):
            process.stop()
        reap_containers()
    return servers


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


def build_v1_report(
    plan: V1Plan,
    settings,
    out: Path,
    model_dir: Path,
    elapsed: float,
    weight_updates: list,
    orchestrator_config: dict,
    servers: list[dict[str, Any]],
    *,
    launched_at: float,
    run: TrainerRun | None = None,
) -> RehearsalReport:
    from transformers import AutoTokenizer

    run_dir = Path(orchestrator_config["output_dir"])
    ranks = int(orchestrator_config.get("num_train_workers") or 1)
    samples, traces = [], []
    for step in range(1, settings.steps + 1):
        step_dir = run_dir / "rollouts" / f"step_{step}"
        try:
            for rank in range(ranks):
                samples += read_micro_batches(step_dir / f"rank_{rank}.bin", step)
            traces += read_traces(step_dir / "train" / "all" / "traces.jsonl", step)
        except (OSError, BatchFormatError) as exc:
            raise RehearsalError(f"cannot read the batch of step {step}: {exc}") from exc
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    special = {tokenizer.convert_tokens_to_ids(token) for token in ("<|im_start|>", "<|endoftext|>")}
    algo = (plan.raw.get("orchestrator") or {}).get("algo") or {}
    grpo = algo.get("type", "grpo") == "grpo" and not algo.get("length_penalty")
    decode = lambda ids: tokenizer.decode(ids, skip_special_tokens=False)  # noqa: E731
    batch: V1Figures = v1_figures(samples, traces, special, check_advantages=grpo, decode=decode)
    if run is None:
        trainer = [json.loads(line) for line in read(out / "trainer.jsonl").splitlines() if line.strip()]
    else:
        trainer = finish_trainer_run(run, out / PROBE, run_dir, model_dir, v1_samples(samples), weight_updates)
    logged = [json.loads(line) for line in read(run_dir / "metrics.jsonl").splitlines() if line.strip()]
    stale, at_end = cancellations_logged(read(out / "logs" / "orchestrator.log"))
    return report_from(
        batch,
        trainer,
        elapsed,
        launched_at,
        read_episodes(out / "trajectories"),
        config=str(plan.path),
        output_dir=str(out),
        steps_requested=settings.steps,
        trajectory_strategy="branches (v1 traces)",
        weight_updates=len(weight_updates),
        env_metrics=mean_of(logged, env_metric_key),
        orchestrator_metrics=mean_of(logged, orchestrator_key),
        dropped=plan.dropped,
        generation="v1",
        env_servers=[
            {**server, "rollouts": 0, "samples": 0, **batch.by_source.get(server["source"], {})} for server in servers
        ],
        branch_points=batch.branch_points,
        branches_per_rollout=batch.branches_per_rollout,
        cancelled_stale=stale,
        cancelled_at_end=at_end,
        trainer_run=run,
    )


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


__all__ = ["rehearse_v1"]
