"""Standalone mode: GRPO-style steps of rollouts without prime-rl or a GPU.

Each step runs ``batch_size`` rollouts in groups of ``rollouts_per_example`` (one group per
example, as prime-rl's orchestrator does) against any OpenAI-compatible endpoint, or against the
scripted policy server started here when no endpoint is given. It computes what prime-rl's
trainer would see: the advantage of each rollout is its reward minus its group's mean (no std
normalisation, as at prime-rl c87c19b), and a group whose rewards are all equal has zero
advantage and teaches nothing. Nothing is trained: this checks the loop end to end and measures it.

Written to ``output_dir``: ``trajectories/`` (one JSON per rollout), ``steps.jsonl`` (one line per
step) and ``summary.json``. Optional ``StepLogger``s (e.g. ``air.runs.wandb_logging``) see every step too.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import re
import statistics
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from openai import AsyncOpenAI

from air.env.load import load_env
from air.env.metrics import metric_value, task_name_of
from air.env.trajectories import trajectory_path, write_trajectory
from air.env.trajectory_reader import load_trajectory
from air.runs.interruption import GracefulInterrupt, census, write_json_atomically
from air.runs.run_disk import WholeLines
from air.runs.run_folder import RunFolder
from air.runs.run_log import log_file
from air.runs.standalone_settings import StandaloneSettings
from air.sandbox.errors import SandboxesUnavailable
from air.serving.models.served_model import is_model_spec
from air.serving.prime_rl_vllm import PrimeRlVllm, vllm_install

log = logging.getLogger(__name__)


class StepLogger(Protocol):
    """Sends a run somewhere else (an experiment tracker). It must not raise: the run's files come first."""

    def start(self, settings: StandaloneSettings, output_dir: Path) -> None: ...

    def log_step(self, stats: dict[str, Any], groups: list[list[dict[str, Any]]]) -> None: ...

    def finish(self, summary: dict[str, Any] | None) -> None:
        """``summary`` is None when the run failed."""


def timeout_cause(error: Any, model_timeout: float) -> str | None:
    """The one line for a rollout the model's time limit ended, naming the option that sets it; None for
    any other error. An endpoint's silence (the client's timeout) or our own model's stall (its server's
    500, air.serving.runtime.engine_progress) ended it."""
    if isinstance(error, dict):
        error = error.get("error_chain_repr") or error.get("error") or ""
    text = str(error or "")
    if "APITimeoutError" in text or "Request timed out" in text:
        return (
            f"the model did not answer within --model-timeout ({model_timeout:g} s, tried twice): "
            "raise --model-timeout for a slow endpoint"
        )
    if "made no progress" in text:
        return (
            f"the local model made no progress for --model-timeout ({model_timeout:g} s): it is hung, or "
            "the machine is that busy (raise --model-timeout)"
        )
    return None


def group_advantages(rewards: list[float]) -> list[float]:
    """prime-rl c87c19b: advantage = reward - mean(rewards of the group)."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]


def masked_cause(error: Any) -> str:
    """One line for why a rollout was masked, from what verifiers puts in an output's ``error``: our own
    message (the outermost error's), without the exception chain (that is in the trajectory and run.log)."""
    if isinstance(error, dict):
        error = error.get("error_chain_repr") or error.get("error") or ""
    text = str(error).split(" -> ")[0].strip()
    match = re.fullmatch(r"""\w+\((['"])(.*)\1\)""", text, re.DOTALL)
    text = match.group(2) if match else text
    return text.splitlines()[0][:300] if text else "unknown error"


def count_causes(outputs: list[dict[str, Any]]) -> dict[str, int]:
    # masked_because: air_mlgym's own line for it (the cause, also when verifiers' error has no message)
    return dict(Counter(o.get("masked_because") or masked_cause(o["error"]) for o in outputs if o.get("error")))


def step_statistics(step: int, groups: list[list[dict[str, Any]]], seconds: float) -> dict[str, Any]:
    """What a trainer step would see, from the outputs of its groups (masked rollouts excluded). A figure
    with nothing to average is None (JSON null), never NaN."""
    rewards, advantages, validates, errors, zero_groups, scores, suspicious = [], [], [], 0, 0, [], 0
    counted_groups = 0
    for outputs in groups:
        kept = [o for o in outputs if not o.get("error")]
        errors += len(outputs) - len(kept)
        group_rewards = [float(o.get("reward") or 0.0) for o in kept]
        group_adv = group_advantages(group_rewards)
        counted_groups += bool(kept)
        if kept and all(abs(a) < 1e-9 for a in group_adv):
            zero_groups += 1
        rewards += group_rewards
        advantages += group_adv
        for o in kept:
            metrics = o.get("metrics") or {}
            validates.append(float(metrics.get("validates", 0.0)))
            suspicious += int(metrics.get("suspicious_evaluations", 0.0))
            final = metric_value(metrics, "final_score", task_name_of(o))
            if final is not None:
                scores.append(float(final))
    return {
        "step": step,
        "rollouts": sum(len(g) for g in groups),
        "masked": errors,
        "masked_causes": count_causes([o for outputs in groups for o in outputs]),
        "reward_mean": _mean(rewards),
        "reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else (0.0 if rewards else None),
        "reward_min": min(rewards) if rewards else None,
        "reward_max": max(rewards) if rewards else None,
        "advantage_abs_mean": _mean([abs(a) for a in advantages]),
        "zero_advantage_groups": zero_groups / counted_groups if counted_groups else None,
        "validates_per_rollout": _mean(validates),
        "final_score_mean": _mean(scores),
        "suspicious_evaluations": suspicious,
        "seconds": seconds,
    }


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


async def run_standalone(
    settings: StandaloneSettings,
    on_step: Callable[[dict[str, Any]], None] | None = None,
    on_rollout: Callable[[], None] | None = None,
    loggers: Sequence[StepLogger] = (),
    folder: RunFolder | None = None,
    on_start: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Run the steps; returns the summary (also written to the run folder's summary.json, with run.log
    beside it). ``folder``: one already claimed (the CLI claims it first, to print it), else claimed here.
    A run that recorded nothing (it failed to start) leaves no folder behind."""
    folder = folder or settings.open_run_folder()
    try:
        with log_file(folder.path / "run.log"):
            return await _run_steps(settings, folder.path, on_step, on_rollout, loggers, on_start)
    finally:
        if not folder.recorded_anything():
            folder.discard()


def _policy_server(settings: StandaloneSettings, out: Path) -> Any:
    """The agent's server: a model (smollm2, model:DIR) on prime-rl's vLLM where --prime-rl (default
    $PRIME_RL_DIR) names an install that has it (docs/decisions/0018-one-serving-engine.md); else air's server,
    for a scripted agent or a model on air's transformers runtime. --model-timeout bounds that runtime's stalls,
    not its requests: on a busy CPU it is slow, not hung."""
    from air.serving.models.served_model import model_dir_for
    from air.serving.server import PolicyServer

    model = is_model_spec(settings.policy)  # a scripted agent never asks the disk for prime-rl's venv
    found = vllm_install(settings.prime_rl or os.environ.get("PRIME_RL_DIR")) if model else None
    if found is not None:
        python, generation = found
        server = PrimeRlVllm(python, generation, model_dir_for(settings.policy), out / "vllm", seed=settings.seed)
        log.info("%s: prime-rl's vLLM from %s serves it (a minute to start; %s)", settings.policy, python, server.log)
        return server
    return PolicyServer(
        settings.policy, seed=settings.seed, vllm_model=settings.vllm_model, stall_s=settings.model_timeout
    )


async def _run_steps(
    settings: StandaloneSettings,
    out: Path,
    on_step: Callable[[dict[str, Any]], None] | None,
    on_rollout: Callable[[], None] | None,
    loggers: Sequence[StepLogger],
    on_start: Callable[[], None] | None = None,
) -> dict[str, Any]:
    env = _load_env(settings, out)
    server = None
    if settings.base_url is None:
        server = _policy_server(settings, out)
        server.start()
        base_url, model, api_key = server.base_url, server.model_name, "scripted"
    else:
        base_url = settings.base_url
        model = settings.model or "default"
        api_key = os.environ.get(settings.api_key_var, "EMPTY")
    # One retry: a transient 5xx or dropped connection is forgiven, a hung endpoint fails in 2 x model_timeout.
    # Our own model's requests wait while its engine progresses (its server answers 500 on a stall).
    ours = server is not None and not isinstance(server, PrimeRlVllm)
    timeout = None if ours and is_model_spec(settings.policy) else settings.model_timeout
    client = AsyncOpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=1)
    sampling: dict[str, Any] = {"temperature": settings.temperature}
    if settings.max_tokens:
        sampling["max_tokens"] = settings.max_tokens
    rows = env.get_dataset().to_list()
    groups_per_step = settings.batch_size // settings.rollouts_per_example
    policy_name = settings.policy if server is not None else None
    steps: list[dict[str, Any]] = []
    started = time.perf_counter()
    status, stopped_by = "interrupted", None
    # Ctrl-C anywhere in here, the summary included, is a cancel (interruption): the rollouts in flight
    # record themselves, the summary is written, and only then may a pending cancel land (client.close).
    async with GracefulInterrupt(getattr(env, "core", None)) as interrupt:
        try:
            for logger in loggers:
                logger.start(settings, out)
            if on_start:
                on_start()
            with WholeLines(out / "steps.jsonl") as log_file:  # a full disk leaves no half line
                for step in range(1, settings.steps + 1):  # 1-based, as the console counts them
                    t0 = time.perf_counter()
                    group_inputs = _step_inputs(rows, (step - 1) * groups_per_step, step, settings, policy_name)

                    async def one_rollout(row: dict[str, Any]) -> dict[str, Any]:
                        # Its own sampling arguments: the scripted agent's seed is the rollout's (rollout_sampling).
                        # trajectory_path: where air_mlgym saved the rollout, for loggers to point at.
                        (output,) = await env.run_group(
                            [row],
                            client,
                            model,
                            rollout_sampling(sampling, settings, row["info"], seeded=server is not None),
                            state_columns=["trajectory_path", "masked_because"],
                        )
                        output = dict(output)
                        if cause := timeout_cause(output.get("error"), settings.model_timeout):
                            output["masked_because"] = cause  # the option to raise, not verifiers' "ModelError()"
                            log.error(cause)  # once on the console (run_log counts the repeats)
                        if on_rollout:
                            on_rollout()
                        return output

                    async def one_group(inputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
                        # In the group's own order, whichever rollout ends first: figures never follow timing.
                        outputs = list(await asyncio.gather(*(one_rollout(row) for row in inputs)))
                        await asyncio.to_thread(record_advantages, outputs)
                        return outputs

                    groups = await asyncio.gather(*(one_group(inputs) for inputs in group_inputs))
                    stats = step_statistics(step, groups, time.perf_counter() - t0)
                    steps.append(stats)
                    log_file.append(json.dumps(stats, allow_nan=False))
                    if on_step:
                        on_step(stats)
                    for logger in loggers:
                        logger.log_step(stats, groups)
            status = "completed"
        except SandboxesUnavailable as exc:  # the image is missing, the engine did not come back: stop here
            status, stopped_by = "stopped", str(exc)
            raise
        finally:
            await interrupt.settle()
            if server is not None:
                server.stop()
            served = "scripted (in-process)" if server is not None else base_url
            if isinstance(server, PrimeRlVllm):
                served = f"prime-rl's vLLM ({server.base_url}, log: {server.log})"
            summary = _summary(settings, out, model, served, steps)
            summary.update(status=status, stopped_by=stopped_by, seconds=time.perf_counter() - started)
            write_json_atomically(out / "summary.json", summary)
            for logger in loggers:
                logger.finish(summary if status == "completed" else None)
            await client.close()
    return summary


def _step_inputs(
    rows: list[dict[str, Any]], first: int, step: int, settings: StandaloneSettings, policy: str | None
) -> list[list[dict[str, Any]]]:
    """One group per example, taken in turn from the dataset (from row ``first`` on), labelled with its step;
    each rollout with its place in the group (``rollout``), which keys its sampling seed."""
    groups = []
    for g in range(settings.batch_size // settings.rollouts_per_example):
        row = rows[(first + g) % len(rows)]
        info = {**(row.get("info") or {}), "step": step, "group_id": f"{step}-{g}", "policy": policy}
        groups.append([{**row, "info": {**info, "rollout": i}} for i in range(settings.rollouts_per_example)])
    return groups


def sampling_seed(seed: int, group_id: str, rollout: int) -> int:
    """The scripted agent's seed for rollout ``rollout`` of group ``group_id`` (``<step>-<g>``): a function of
    the run's seed and the rollout's place alone, never of which request reached the server first. 63 bits,
    as the ``seed`` field of OpenAI's API takes them. Nothing of the evaluation's seeds (env.seeds) follows
    from it."""
    digest = hashlib.sha256(f"air-standalone-sampling/{seed}/{group_id}/{rollout}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def rollout_sampling(
    sampling: dict[str, Any], settings: StandaloneSettings, info: dict[str, Any], *, seeded: bool
) -> dict[str, Any]:
    """One rollout's sampling arguments. The scripted agent (``seeded``) gets the rollout's own ``seed``:
    its replies then follow from the seed and the turn (air.serving.server), so a run repeats with its
    ``--seed``. Another endpoint's sampling is its own: no seed is sent there."""
    if not seeded:
        return dict(sampling)
    return {**sampling, "seed": sampling_seed(settings.seed, info["group_id"], info["rollout"])}


def record_advantages(outputs: list[dict[str, Any]]) -> None:
    """Write each kept rollout's advantage into its trajectory (the env saved it before its group ended)."""
    kept = [o for o in outputs if not o.get("error")]
    for output, advantage in zip(kept, group_advantages([float(o.get("reward") or 0.0) for o in kept]), strict=True):
        path = output.get("trajectory_path")
        if not path:
            continue
        path = Path(path)
        record = load_trajectory(path)
        if trajectory_path(record, path.parent.parent) == path:  # rewritten in place, atomically
            write_trajectory(record.model_copy(update={"advantage": advantage}), path.parent.parent)


def _summary(
    settings: StandaloneSettings, out: Path, model: str, endpoint: str, steps: list[dict[str, Any]]
) -> dict[str, Any]:
    causes: Counter[str] = Counter()
    for s in steps:
        causes.update(s["masked_causes"])
    on_disk = census(out / "trajectories")  # what the folder holds, so a stopped run's summary agrees with it
    return {
        "settings": settings.model_dump(mode="json"),
        "output_dir": str(out),
        "model": model,
        "base_url": endpoint,
        "steps": steps,
        "steps_run": len(steps),
        "reward_mean_first_step": steps[0]["reward_mean"] if steps else None,
        "reward_mean_last_step": steps[-1]["reward_mean"] if steps else None,
        "zero_advantage_groups_mean": _mean([z for s in steps if (z := s["zero_advantage_groups"]) is not None]),
        "rollouts": sum(s["rollouts"] for s in steps),
        "masked": sum(s["masked"] for s in steps),
        "masked_causes": dict(causes.most_common()),
        # A stopped run: the rollouts of the step it was in (finished ones are true, but no step
        # statistic takes them in) and those cut short (no reward, in no mean or count above).
        "unfinished_step": on_disk.unfinished_step(len(steps)),
        "trajectories": on_disk.as_summary(),
    }


def _load_env(settings: StandaloneSettings, out: Path):  # -> vf.Environment (air.env.load)
    return load_env(settings.env, **settings.env_arguments(out))
