"""prime-rl main's (559b447) own trainer, run as its `rl` launcher runs it, with per-step measurements.

Runs inside prime-rl's venv (stdlib + torch + prime-rl only):

    python -m air_prime_rl.v1.trainer adapt TRAINER_JSON OVERRIDES_JSON OUT_JSON
        The trainer.json prime-rl's own `write_subconfigs` wrote, with the rehearsal's overrides
        (`{"model_dir", "output_dir", "max_steps", "device": "cpu"|"cuda"}`), validated by prime-rl's own
        TrainerConfig before it is written.
    python -m torch.distributed.run --nproc-per-node=1 --rdzv-endpoint=localhost:PORT \\
            -m air_prime_rl.v1.trainer train TRAINER_JSON PROBE_JSONL
        `prime_rl.trainer.rl.train`'s main with `@ TRAINER_JSON` (as `rl` starts it), CUDA redirected to the
        CPU when there is no GPU, flash-attn's varlen function computed by torch SDPA where flash-attn is not
        installed (air_prime_rl/sdpa_varlen.py), and one JSON line per step appended to PROBE_JSONL
        (air_prime_rl/trainer_probe.py).

The trainer reads `OUTPUT_DIR/rollouts/step_k/rank_R.bin` (filesystem rollout transport) and publishes
`OUTPUT_DIR/broadcasts/step_k/` (filesystem weight broadcast) as under `rl`.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

# Overrides that make a CPU step fast, and why (see `adapt`).
CPU_MODEL_OVERRIDES = {
    "compile": None,  # torch.compile of each layer: minutes of compiling on a CPU, for a model of kilobytes
    "ac": None,  # activation checkpointing: recomputes the forward; memory is not short on the CPU
    "ac_offloading": None,  # offloads activations to (pinned) host memory: they are there already
    "optim_cpu_offload": False,  # optimizer state offload to the CPU (CUDA streams): it is there already
    "fsdp_cpu_offload": False,
}


def adapt(trainer_json: str, overrides_json: str, out_json: str) -> None:
    from prime_rl.configs.trainer import TrainerConfig

    config = json.loads(Path(trainer_json).read_text())
    overrides = json.loads(Path(overrides_json).read_text())
    device = overrides.get("device", "cpu")
    if device not in ("cpu", "cuda"):
        raise SystemExit(f"device must be cpu or cuda, not {device!r}")
    model_dir = str(Path(overrides["model_dir"]).resolve())
    config["model"]["name"] = model_dir
    config["tokenizer"]["name"] = model_dir
    config["output_dir"] = str(Path(overrides["output_dir"]).resolve())
    config["max_steps"] = int(overrides["max_steps"])
    config.setdefault("monitors", {})["wandb"] = None  # no W&B; the file monitor stays
    config["rollout_transport"] = {"type": "filesystem"}  # the derived default (zmq) needs a live orchestrator
    config["weight_broadcast"] = {"type": "filesystem"}  # broadcasts/step_k/ for the orchestrator and checks
    # main's config has no sdpa choice: flash-attn 2's varlen call, computed by sdpa_varlen where flash-attn
    # is missing (see `train`).
    config["model"]["attn"] = "flash_attention_2"
    config["ckpt"] = None  # nothing resumes a rehearsal
    config["heartbeat"] = None
    config["metrics_server"] = None
    if device == "cpu":
        config["model"].update(CPU_MODEL_OVERRIDES)
    validated = TrainerConfig.model_validate(config)
    text = json.dumps(validated.model_dump(mode="json"), indent=2)
    TrainerConfig.model_validate(json.loads(text))  # what is written reads back
    Path(out_json).write_text(text + "\n")


def _flash_attn_is_real() -> bool:
    try:
        import flash_attn
    except ImportError:
        return False
    return "stand_ins" not in str(getattr(flash_attn, "__file__", ""))  # stand_ins/cpu: import-only


def use_sdpa_varlen() -> None:
    """Put sdpa_varlen's function where main's model code looks for flash-attn 2's varlen function."""
    from air_prime_rl.sdpa_varlen import flash_attn_varlen_func

    try:
        import flash_attn

        flash_attn.flash_attn_varlen_func = flash_attn_varlen_func  # for code that imports it when called
    except ImportError:
        pass
    import prime_rl.trainer.models.layers.attn as attn

    attn.flash_attn_varlen_func = flash_attn_varlen_func
    attn.FlashAttention._funcs[2] = flash_attn_varlen_func
    # Other model files keep their own table of the flash-attn functions (MoE families).
    for name, module in list(sys.modules.items()):
        if name.startswith("prime_rl.trainer.models.") and module is not None:
            if getattr(module, "flash_attn_varlen_func", None) is not None:
                module.flash_attn_varlen_func = flash_attn_varlen_func
            for value in vars(module).values():
                funcs = getattr(value, "_funcs", None)
                if isinstance(value, type) and isinstance(funcs, dict) and 2 in funcs:
                    funcs[2] = flash_attn_varlen_func


def train(trainer_json: str, probe_jsonl: str) -> None:
    import torch

    from air_prime_rl.trainer_probe import Probe, samples_by_lengths

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        from air_prime_rl.v1.cpu import redirect_cuda_to_cpu_v1

        redirect_cuda_to_cpu_v1()
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // int(os.environ.get("LOCAL_WORLD_SIZE", "1"))))

    import prime_rl.monitors as monitors
    import prime_rl.trainer.models  # noqa: F401  (the model families, for use_sdpa_varlen)
    import prime_rl.trainer.rl.train as rl_train

    if not _flash_attn_is_real():
        use_sdpa_varlen()

    probe = Probe(Path(probe_jsonl), device, int(os.environ.get("RANK", "0"))).install()

    log = monitors.log

    async def log_and_measure(metrics, step=None, *args, **kwargs):
        if isinstance(metrics, dict):
            probe.note_metrics(dict(metrics), step)
        return await log(metrics, step, *args, **kwargs)

    monitors.log = log_and_measure

    get_batch = rl_train.DataLoader.get_batch

    def get_batch_and_measure(self, *args, **kwargs):
        micro_batches = get_batch(self, *args, **kwargs)
        probe.note_batch(*samples_by_lengths(micro_batches))
        return micro_batches

    rl_train.DataLoader.get_batch = get_batch_and_measure
    sys.argv = ["prime_rl.trainer.rl.train", "@", trainer_json]  # the argv `rl` gives it
    rl_train.main()


def main() -> None:
    commands = {"adapt": (adapt, 3), "train": (train, 2)}
    if len(sys.argv) < 2 or sys.argv[1] not in commands or len(sys.argv) - 2 != commands[sys.argv[1]][1]:
        raise SystemExit(__doc__)
    function, _ = commands[sys.argv[1]]
    function(*sys.argv[2:])


if __name__ == "__main__":
    main()
