"""Runs inside today's prime-rl venv (verifiers v1), started by ``air rehearse``: prime-rl's own code.

    python -m air_prime_rl.v1.entry derive RL_TOML CONFIG_DIR
        prime-rl's ``RLConfig`` loads the rehearsal's combined config and ``write_subconfigs`` (what
        ``uv run rl`` does before it launches anything) writes ``orchestrator.json`` and one
        ``envs/<split>/<source>.json`` per env server the launcher would start.
    python -m air_prime_rl.v1.entry trainer OUTPUT_DIR STEPS RANKS REPORT_JSONL
        A stand-in trainer (see :func:`stand_in_trainer`).

The orchestrator and env servers are started from prime-rl's own entry points, not from here. Only the
standard library and prime-rl are imported: this file runs in someone else's environment.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from pathlib import Path


def derive(rl_toml: str, config_dir: str) -> None:
    from prime_rl.configs.rl import RLConfig
    from prime_rl.entrypoints.rl import write_subconfigs
    from prime_rl.utils.config import cli

    config = cli(RLConfig, args=["@", rl_toml])
    write_subconfigs(config, Path(config_dir))


def stand_in_trainer(output_dir: Path, steps: int, ranks: int, report: Path) -> None:
    """What the orchestrator waits for from a trainer, and nothing else. It publishes the start
    weights (``broadcasts/step_0/STABLE``); for batch k = 1..steps it receives every data rank's
    micro batches with the trainer's own receiver, turns each into tensors with the trainer's own
    data loader conversion, and publishes ``broadcasts/step_k/STABLE`` (the orchestrator then calls
    the server's weight routes, as after a real update; the trainer never publishes the last step).
    No weights are written: the scripted server's text does not depend on them."""
    from prime_rl.configs.shared import FileSystemTransportConfig
    from prime_rl.trainer.rl.data import DataLoader
    from prime_rl.transports.rollouts import setup_micro_batch_receiver

    publish(output_dir, 0)
    receivers = [setup_micro_batch_receiver(output_dir, rank, 1, FileSystemTransportConfig()) for rank in range(ranks)]
    for step in range(1, steps + 1):
        entry: dict = {"step": step}
        micro_batches, tokens, trained = 0, 0, 0
        try:
            for receiver in receivers:
                receiver.wait()
                entry.setdefault("received_at", time.time())
                for micro_batch in receiver.receive():
                    tensors = DataLoader._micro_batch_to_tensor(None, micro_batch)
                    micro_batches += 1
                    tokens += int(tensors["input_ids"].numel())
                    trained += int(tensors["loss_mask"].sum())
            entry.update(micro_batches=micro_batches, input_tokens=tokens, trained_tokens=trained)
        except Exception as exc:  # reported, and the rehearsal fails on it: the real trainer would have
            entry["error"] = "".join(traceback.format_exception_only(type(exc), exc)).strip()
        with report.open("a") as out:
            out.write(json.dumps(entry) + "\n")
        if step < steps:
            publish(output_dir, step)


def publish(output_dir: Path, step: int) -> None:
    folder = output_dir / "broadcasts" / f"step_{step}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "STABLE").touch()


def trainer(output_dir: str, steps: str, ranks: str, report: str) -> None:
    stand_in_trainer(Path(output_dir), int(steps), int(ranks), Path(report))


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    {"derive": derive, "trainer": trainer}[command](*arguments)
