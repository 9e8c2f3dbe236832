"""``air rehearse``: a training run's whole data path on this machine, before any GPU is booked.

One path for both generations of prime-rl: the config's generation picks its implementation of
:class:`air.rehearsal.generation.Generation` (``classic/``: c87c19b; ``v1/``: today's, with env servers), and
this module runs its steps around what they share: prime-rl's venv found and probed, the model, the server
the orchestrator samples from (:func:`policy_server`), prime-rl's own trainer with ``--trainer``
(:mod:`.live_trainer`), and one report with the same keys for both (:mod:`.report`).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from typing import Any

from air.launch.config_v1 import detect_generation
from air.rehearsal.checks import find_orchestrator_python, read_config
from air.rehearsal.classic.generation import Classic
from air.rehearsal.errors import RehearsalError
from air.rehearsal.generation import Generation, Rehearsal
from air.rehearsal.launch import commit_of, new_output_folder, read, read_episodes, tiny_model
from air.rehearsal.live_trainer import PROBE, cpu_batch, derive_trainer_config, finish_trainer_run, trainer_device
from air.rehearsal.report import RehearsalReport, report_from
from air.rehearsal.settings import RehearsalSettings
from air.rehearsal.trainer_report import TrainerRun, latest_broadcast, served_sample
from air.rehearsal.v1.generation import V1
from air.serving.models.served_model import is_model_spec, model_dir_for
from air.serving.models.tiny_model import TinyModelError

GENERATIONS: dict[str, Generation[Any]] = {"classic": Classic(), "v1": V1()}
ENGINE_STAGE = "starting the server"


def engine_name(server, policy: str) -> str:
    """Which server answered, for the report: prime-rl's vLLM, or air's (a model on its transformers runtime
    where prime-rl's venv has no vLLM; a scripted policy, the tiny model giving its logprobs)."""
    from air.serving.prime_rl_vllm import PrimeRlVllm

    if isinstance(server, PrimeRlVllm):
        return f"vllm: prime-rl's inference server ({server.log})"
    return "air: transformers runtime" if is_model_spec(policy) else "air: scripted policy"


def served_model(settings: RehearsalSettings, say: Callable[[str, int, int], None]):
    """The model folder the server serves: a model spec's (SmolLM2 prepared once), else the tiny model."""
    if not is_model_spec(settings.policy):
        return tiny_model(settings.model_dir, say)
    if settings.model_dir is not None:
        raise RehearsalError(f"--model names the tiny model's folder; --policy {settings.policy} brings its own")
    say(settings.policy, 0, 1)
    try:
        folder = model_dir_for(settings.policy)
    except TinyModelError as exc:
        raise RehearsalError(str(exc)) from exc
    say(settings.policy, 1, 1)
    return folder


def steps_ahead(generation: str, raw: dict[str, Any]) -> int:
    """How many steps c87c19b's orchestrator may sample before it must load a broadcast (its
    ``max_async_level``, 1 by default: a 2-step run may never load one); today's loads step 0's first."""
    if generation != "classic":
        return 0
    return int(raw.get("max_async_level", raw.get("orchestrator", {}).get("max_async_level", 1)))


def lora_rank(raw: dict[str, Any]) -> int | None:
    """The trainer's LoRA rank where the config trains an adapter (prime-rl's default rank when unset)."""
    lora = raw.get("trainer", {}).get("model", {}).get("lora")
    return int(lora.get("rank", 16)) if isinstance(lora, dict) else None


def policy_server(settings: RehearsalSettings, generation: str, plan, raw: dict[str, Any], python, model_dir, out):
    """What the orchestrator samples from: for a model (``--policy smollm2``, ``model:DIR``) with prime-rl's
    trainer, prime-rl's own inference server where its venv has vLLM (the --cpu install), adapters enabled
    at the trainer's rank; else air's server answering like vLLM (docs/decisions/0018). Not vLLM without
    ``--trainer``: the stand-in trainer publishes broadcasts with no weights, which vLLM would refuse."""
    from air.serving.prime_rl_vllm import PrimeRlVllm, has_vllm
    from air.serving.server import PolicyServer

    if is_model_spec(settings.policy) and settings.trainer and has_vllm(python):
        return PrimeRlVllm(
            python,
            generation,
            model_dir,
            out / "vllm",
            max_model_len=plan.max_model_len,
            seed=settings.seed,
            lora_rank=lora_rank(raw),
            startup_s=settings.timeout_s,
        )
    return PolicyServer(
        settings.policy,
        vllm_model=model_dir,
        max_model_len=plan.max_model_len,
        seed=settings.seed,
        load_broadcasts=settings.trainer,
    )


def ask_served(server, run_dir, trained: list[Any]):
    """The first trained sample through the server, under its model and under the trainer's last LoRA
    broadcast loaded by the server's own route, as the orchestrator loads the next one (None when nothing
    was trained or the broadcasts are full weights, which replace the served model in place)."""
    import httpx

    from air.serving.prime_rl_vllm import PrimeRlVllm
    from air.serving.runtime.broadcast_loading import ADAPTER_CONFIG

    broadcast = latest_broadcast(run_dir)
    samples = sorted((s for s in trained if any(s.mask[1:])), key=lambda s: s.step)
    if broadcast is None or not (broadcast / ADAPTER_CONFIG).is_file() or not samples:
        return None
    root, name = server.base_url.removesuffix("/v1"), f"rehearsal-{broadcast.name}"
    vllm = isinstance(server, PrimeRlVllm)
    try:
        adapter = {"lora_name": name, "lora_path": str(broadcast)}
        httpx.post(f"{root}/load_lora_adapter", json=adapter, timeout=600).raise_for_status()
        first = samples[0]
        return served_sample(server.base_url, server.model_name, name, first.token_ids, first.mask, vllm=vllm)
    except httpx.HTTPError as exc:
        raise RehearsalError(f"the server could not score the fixed sample: {exc}") from exc


def rehearse(settings: RehearsalSettings, progress: Callable[[str, int, int], None] | None = None) -> RehearsalReport:
    """Run the rehearsal; ``progress(what, done, total)`` hears about set-up stages and finished steps.
    The config's generation picks the path: prime-rl c87c19b (classic) or today's (v1, env servers)."""
    say = progress or (lambda what, done, total: None)
    path = settings.config.resolve()
    raw = read_config(path)
    generation = GENERATIONS[detect_generation(raw)]
    plan = generation.plan(path, raw, settings)
    python, root = find_orchestrator_python(
        settings.prime_rl, generation.name, say=say, timeout_s=settings.timeout_s, trainer=settings.trainer
    )
    generation.check(plan)
    run = None
    if settings.trainer:
        run = TrainerRun(device=trainer_device(python, generation.name, root), ahead=steps_ahead(generation.name, raw))
    out = new_output_folder(settings.output)
    model_dir = served_model(settings, say)
    env_args = {"trajectory_dir": str(out / "trajectories"), "run_id": f"rehearse-{os.getpid()}"}
    rehearsal = Rehearsal(settings, python, out, model_dir, say, env_args)
    serving = policy_server(settings, generation.name, plan, raw, python, model_dir, out)
    say(ENGINE_STAGE, 0, 1)
    with serving as server:
        say(ENGINE_STAGE, 1, 1)
        batch_size = None
        if run is not None and run.device == "cpu":
            batch_size, run.sizing = cpu_batch(plan.batch_size, plan.group_size)
        derived = generation.derive(rehearsal, plan, server, batch_size)
        trainer_config = None
        if run is not None:
            trainer_config = derive_trainer_config(
                python,
                generation.name,
                derived.trainer_source,
                out,
                run,
                model_dir=model_dir,
                output_dir=derived.trainer_output_dir,
                steps=settings.steps,
                timeout=settings.timeout_s,
            )
        started = time.time()
        servers = generation.launch(rehearsal, plan, derived, trainer_config, server.weight_updates)
        elapsed = time.time() - started
        updates = list(server.weight_updates)
        read_back = generation.read(rehearsal, plan, derived)
        if run is None:  # the stand-in trainer's line per step
            trainer = [json.loads(line) for line in read(out / "trainer.jsonl").splitlines() if line.strip()]
        else:
            trainer = finish_trainer_run(run, out / PROBE, derived.run_dir, model_dir, read_back.trained, updates)
            if is_model_spec(settings.policy):  # the server still runs: ask it, before and after
                run.served_sample = ask_served(server, derived.run_dir, read_back.trained)
    report = report_from(
        read_back.figures,
        trainer,
        elapsed,
        started,
        read_episodes(out / "trajectories"),
        config=str(plan.path),
        output_dir=str(out),
        steps_requested=settings.steps,
        weight_updates=len(updates),
        dropped=plan.dropped,
        trainer_run=run,
        engine=engine_name(serving, settings.policy),
        **generation.report_fields(rehearsal, plan, derived, read_back, servers),
    )
    report.prime_rl_commit = commit_of(root)
    return report


__all__ = ["GENERATIONS", "RehearsalError", "RehearsalReport", "RehearsalSettings", "rehearse"]
