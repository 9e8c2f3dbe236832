"""Runs inside prime-rl c87c19b's venv: prime-rl's own trainer entry point, measured, on a GPU or the CPU.

    python -m air_prime_rl.classic.trainer derive RL_TOML OVERRIDES_JSON OUT_TOML
        The trainer config exactly as ``rl`` derives it from a combined config (``RLConfig``, then
        ``trainer.model_dump``), with the rehearsal's overrides (OVERRIDES_JSON: model_dir, output_dir,
        max_steps, device) applied, written as TOML.
    python -m torch.distributed.run --nproc-per-node=1 --rdzv-endpoint=localhost:PORT \\
            -m air_prime_rl.classic.trainer train TRAINER_TOML PROBE_JSONL
        ``prime_rl.trainer.rl.train.main`` with ``sys.argv = ["train", "@", TRAINER_TOML]``, as ``rl`` starts
        it. Without CUDA, CUDA calls go to the CPU (air_prime_rl/cpu_torch.py). One JSON line per step is
        appended to PROBE_JSONL (loss, grad norm, parameter change, tokens, samples, memory, time).

It reads ``OUTPUT_DIR/run_default/rollouts/step_k/rollouts.bin`` and writes the filesystem weight broadcast
``OUTPUT_DIR/run_default/broadcasts/step_k/`` (+ STABLE), as under ``rl``. Only the standard library, torch
and prime-rl are imported here (and air_prime_rl's own cpu_torch and trainer_probe).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

# The trainer's CPU settings: float32 throughout (CPUs without AVX512-BF16 or AMX emulate bfloat16 matmuls,
# many times slower; FSDP's parameter dtype is hard-coded to bfloat16, see _cpu_prime_rl); no compile, no
# activation checkpointing or offloading, no resharding (one process: nothing to save; they only cost time).
CPU_MODEL = {"optimization_dtype": "float32", "reduce_dtype": "float32", "fsdp_cpu_offload": False,
             "optim_cpu_offload": False, "reshard_after_forward": False}  # fmt: skip
CPU_MODEL_DROP = ("compile", "ac", "ac_offloading")


def derive(rl_toml: str, overrides_json: str, out_toml: str) -> None:
    import tomli_w

    from air_prime_rl.classic.entry import rl_config

    trainer = rl_config(rl_toml).trainer.model_dump(exclude_none=True, mode="json")
    overrides = json.loads(Path(overrides_json).read_text())
    model = trainer.setdefault("model", {})
    model.update(name=overrides["model_dir"], attn="sdpa")  # sdpa: no flash-attn kernels here or needed
    trainer.setdefault("tokenizer", {})["name"] = overrides["model_dir"]
    trainer["output_dir"] = overrides["output_dir"]
    trainer["max_steps"] = int(overrides["max_steps"])
    for key in ("wandb", "ckpt"):  # no W&B; no checkpoints (the filesystem broadcast needs none)
        trainer.pop(key, None)
    if overrides.get("device", "cuda") == "cpu":
        model.update(CPU_MODEL)
        for key in CPU_MODEL_DROP:
            model.pop(key, None)
    Path(out_toml).write_text(tomli_w.dumps(trainer))


def _cpu_prime_rl() -> None:
    """A CPU-only fix to prime-rl c87c19b beyond cpu_torch's, its code unchanged: PerfCounter divides by a
    peak-FLOPS figure that is 0 without CUDA (ZeroDivisionError at step 2), so its MFU is reported as none."""
    from prime_rl.trainer.perf import PerfCounter

    get_mfu = PerfCounter.get_mfu

    def mfu(self):
        return get_mfu(self) if self.gpu_peak_flops else None

    PerfCounter.get_mfu = mfu


def train(trainer_toml: str, probe_jsonl: str) -> None:
    import os

    from air_prime_rl.cpu_torch import redirect_cuda_to_cpu
    from air_prime_rl.trainer_probe import Probe, samples_by_positions

    device = "cpu" if redirect_cuda_to_cpu() else "cuda"
    if device == "cpu":
        _cpu_prime_rl()
    from prime_rl.trainer.rl import train as train_module
    from prime_rl.trainer.rl.data import DataLoader
    from prime_rl.utils.monitor.base import NoOpMonitor

    probe = Probe(Path(probe_jsonl), device, int(os.environ.get("RANK", "0"))).install()
    keep_log, keep_get_batch = NoOpMonitor.log, DataLoader.get_batch

    def log(self, metrics, step=None):
        keep_log(self, metrics, step)
        probe.note_metrics(dict(metrics), step)

    def get_batch(self):
        micro_batches = keep_get_batch(self)
        probe.note_batch(*samples_by_positions(micro_batches))
        return micro_batches

    NoOpMonitor.log, DataLoader.get_batch = log, get_batch
    started = time.time()
    sys.argv = ["train", "@", trainer_toml]
    train_module.main()
    print(f"air_prime_rl.classic.trainer: prime-rl's trainer finished in {time.time() - started:.1f} s on the {device}")


if __name__ == "__main__":
    command, *arguments = sys.argv[1:]
    {"derive": derive, "train": train}[command](*arguments)
