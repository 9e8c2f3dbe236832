"""``air rehearse``: a training run's whole data path on this machine, before any GPU is booked.

One path for both generations of prime-rl: the config's generation picks its implementation of
:class:`air.rehearsal.generation.Generation` (``classic/``: c87c19b; ``v1/``: today's, with env servers), and
this module runs its steps around what they share: prime-rl's venv found and probed, the tiny model, the
scripted server answering like vLLM (:class:`air.serving.server.PolicyServer`), prime-rl's own trainer with
``--trainer`` (:mod:`.live_trainer`), and one report with the same keys for both (:mod:`.report`).
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
from air.serving.served_model import is_model_spec, model_dir_for
from air.serving.tiny_model import TinyModelError

GENERATIONS: dict[str, Generation[Any]] = {"classic": Classic(), "v1": V1()}


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


def ask_served(server, run_dir, trained: list[Any]):
    """The first trained sample through the server, under its model and under the trainer's last LoRA
    broadcast loaded by the server's own route, as the orchestrator loads the next one (None when nothing
    was trained or the broadcasts are full weights, which replace the served model in place)."""
    import httpx

    from air.serving.broadcast_loading import ADAPTER_CONFIG

    broadcast = latest_broadcast(run_dir)
    samples = sorted((s for s in trained if any(s.mask[1:])), key=lambda s: s.step)
    if broadcast is None or not (broadcast / ADAPTER_CONFIG).is_file() or not samples:
        return None
    root, name = server.base_url.removesuffix("/v1"), f"rehearsal-{broadcast.name}"
    try:
        httpx.post(f"{root}/load_lora_adapter", json={"lora_name": name, "lora_path": str(broadcast)}, timeout=600)
        return served_sample(server.base_url, server.model_name, name, samples[0].token_ids, samples[0].mask)
    except httpx.HTTPError as exc:
        raise RehearsalError(f"the server could not score the fixed sample: {exc}") from exc


def rehearse(settings: RehearsalSettings, progress: Callable[[str, int, int], None] | None = None) -> RehearsalReport:
    """Run the rehearsal; ``progress(what, done, total)`` hears about set-up stages and finished steps.
    The config's generation picks the path: prime-rl c87c19b (classic) or today's (v1, env servers)."""
    from air.serving.server import PolicyServer

    say = progress or (lambda what, done, total: None)
    path = settings.config.resolve()
    raw = read_config(path)
    generation = GENERATIONS[detect_generation(raw)]
    plan = generation.plan(path, raw, settings)
    python, root = find_orchestrator_python(
        settings.prime_rl, generation.name, say=say, timeout_s=settings.timeout_s, trainer=settings.trainer
    )
    generation.check(plan)
    run = TrainerRun(device=trainer_device(python, generation.name, root)) if settings.trainer else None
    out = new_output_folder(settings.output)
    model_dir = served_model(settings, say)
    env_args = {"trajectory_dir": str(out / "trajectories"), "run_id": f"rehearse-{os.getpid()}"}
    rehearsal = Rehearsal(settings, python, out, model_dir, say, env_args)
    with PolicyServer(
        settings.policy,
        vllm_model=model_dir,
        max_model_len=plan.max_model_len,
        seed=settings.seed,
        load_broadcasts=settings.trainer,
    ) as server:
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
        **generation.report_fields(rehearsal, plan, derived, read_back, servers),
    )
    report.prime_rl_commit = commit_of(root)
    return report


__all__ = ["GENERATIONS", "RehearsalError", "RehearsalReport", "RehearsalSettings", "rehearse"]
