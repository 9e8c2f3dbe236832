"""Runs inside prime-rl's venv, started by ``air rehearse``: prime-rl's own code, three small hooks.

    python -m air_prime_rl.classic.entry derive RL_TOML OVERRIDES_JSON OUT_TOML
        The orchestrator config exactly as ``rl`` derives it from a combined config (``RLConfig``, then
        ``orchestrator.model_dump``), with the rehearsal's overrides merged in, written as TOML.
    python -m air_prime_rl.classic.entry run ORCH_TOML METRICS_JSONL STEPS [stand-in|none]
        prime-rl's orchestrator ``main()``, with two additions: every dict it logs to its monitor is
        also appended to METRICS_JSONL (without W&B, prime-rl keeps metrics in memory only), and a
        stand-in trainer thread (see :func:`stand_in_trainer`), unless ``none``: prime-rl's own trainer
        runs beside it (``air rehearse`` with ``--trainer``).

Only the standard library and prime-rl are imported here (with msgspec and tomli-w, prime-rl's own
dependencies): like the trainer entries, this file runs in someone else's environment (prime-rl's venv).
"""

from __future__ import annotations

import json
import sys
import threading
import time
import traceback
from pathlib import Path

POLL_S = 0.2


def rl_config(rl_toml: str):
    """The combined config as ``rl`` loads it (prime-rl's ``RLConfig`` from the TOML file)."""
    from prime_rl.rl import RLConfig

    RLConfig.set_toml_files([rl_toml])
    try:
        return RLConfig()
    finally:
        RLConfig.clear_toml_files()


def derive(rl_toml: str, overrides_json: str, out_toml: str) -> None:
    import tomli_w

    orchestrator = rl_config(rl_toml).orchestrator.model_dump(exclude_none=True, mode="json")
    overrides = json.loads(Path(overrides_json).read_text())
    for key in overrides.pop("_drop", []):
        orchestrator.pop(key, None)
    env_args, env_drop = overrides.pop("_env_args", {}), overrides.pop("_env_drop", [])
    for env in orchestrator.get("env", []):
        args = env.setdefault("args", {})
        for key in env_drop:
            args.pop(key, None)
        args.update(env_args)
    merge(orchestrator, overrides)
    Path(out_toml).write_text(tomli_w.dumps(orchestrator))


def merge(base: dict, update: dict) -> None:
    for key, value in update.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value


def stand_in_trainer(output_dir: Path, steps: int, seq_len: int, report: Path) -> None:
    """What the orchestrator waits for from a trainer, and nothing else: for step k, read
    ``rollouts/step_k/rollouts.bin`` with prime-rl's own decoder, pass every sample through the
    trainer's ``prepare_sample`` (its length checks), then publish ``broadcasts/step_{k+1}/STABLE``
    (the orchestrator then calls the server's weight route, as after a real update). No weights are
    written: the scripted server's text does not depend on them."""
    import msgspec
    from prime_rl.trainer.batch import prepare_sample
    from prime_rl.transport.types import TrainingBatch

    decoder = msgspec.msgpack.Decoder(type=TrainingBatch)
    for step in range(steps):
        batch_file = output_dir / "rollouts" / f"step_{step}" / "rollouts.bin"
        while not batch_file.exists():
            time.sleep(POLL_S)
        started = time.time()
        entry: dict = {"step": step, "received_at": started}
        try:
            batch = decoder.decode(batch_file.read_bytes())
            prepared = [prepare_sample(sample, seq_len) for sample in batch.examples]
            entry.update(
                samples=len(batch.examples),
                batch_step=batch.step,
                trained_tokens=sum(sum(p.loss_mask) for p in prepared),
                input_tokens=sum(len(p.input_ids) for p in prepared),
            )
        except Exception as exc:  # reported, and the rehearsal fails on it: the real trainer would have
            entry["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        with report.open("a") as out:
            out.write(json.dumps(entry) + "\n")
        published = output_dir / "broadcasts" / f"step_{step + 1}"
        published.mkdir(parents=True, exist_ok=True)
        (published / "STABLE").touch()


def run(orch_toml: str, metrics_jsonl: str, steps: str, trainer: str = "stand-in") -> None:
    import tomllib

    from prime_rl.orchestrator import orchestrator
    from prime_rl.utils.monitor.base import NoOpMonitor

    metrics_path = Path(metrics_jsonl)
    lock = threading.Lock()
    keep = NoOpMonitor.log

    def log(self, metrics, step=None):
        keep(self, metrics, step)
        with lock, metrics_path.open("a") as out:
            out.write(json.dumps(metrics, default=float) + "\n")

    NoOpMonitor.log = log
    config = tomllib.loads(Path(orch_toml).read_text())
    if trainer == "stand-in":
        threading.Thread(
            target=stand_in_trainer,
            args=(
                Path(config["output_dir"]),
                int(steps),
                int(config.get("seq_len", 2048)),
                metrics_path.parent / "trainer.jsonl",
            ),
            name="stand-in-trainer",
            daemon=True,
        ).start()
    sys.argv = ["orchestrator", "@", orch_toml]
    orchestrator.main()


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    {"derive": derive, "run": run}[command](*arguments)
