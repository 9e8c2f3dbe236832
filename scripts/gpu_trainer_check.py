"""After one pin's trainer ran on the GPU machine (scripts/gpu_trainer_check.sh): what it did, as JSON.

    python scripts/gpu_trainer_check.py --pin c87|v1 --probe PROBE_JSONL --run-dir RUN --model MODEL_DIR
        --out OUT_JSON [--rc N] [--derive-s S] [--train-s S] [--device cuda|cpu]

Reads the per-step probe lines (air.rehearsal.trainer_report.read_steps), loads the newest broadcast the trainer
published under RUN/broadcasts/ into the tiny model and measures the first trained sample of the first batch
under it (trainer_report.fixed_sample), and writes OUT_JSON with the steps, the fixed sample, the GPU's name, the
torch version and the wall times. Prints a short summary. Exit 0 when the trainer exited 0, finished all its
steps, and published a broadcast that moved the fixed sample; 1 otherwise. Runs in the pin's venv (torch,
transformers, safetensors, msgpack).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import sys
import traceback
from pathlib import Path

STEPS = 3


def first_batch_samples(pin: str, run_dir: Path) -> list:
    """The trained samples of every recorded batch, as the rehearsal's report reads them (TrainedSample)."""
    folders = sorted(
        (folder for folder in (run_dir / "rollouts").glob("step_*") if folder.name[5:].isdigit()),
        key=lambda folder: int(folder.name[5:]),
    )
    if pin == "c87":
        from air.rehearsal.classic.batches import read_batch, trained_samples

        return trained_samples([read_batch(folder / "rollouts.bin")[1] for folder in folders])
    from air.rehearsal.v1.batches import read_micro_batches, trained_samples

    samples = []
    for folder in folders:
        for path in sorted(folder.glob("rank_*.bin")):
            samples += read_micro_batches(path, int(folder.name[5:]))
    return trained_samples(samples)


def jsonable(value):
    """NaN and inf as strings (JSON has none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: jsonable(item) for key, item in value.items()}
    if isinstance(value, list):
        return [jsonable(item) for item in value]
    return value


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pin", choices=("c87", "v1"), required=True)
    parser.add_argument("--probe", type=Path, required=True)
    parser.add_argument("--run-dir", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--rc", type=int, default=None, help="the trainer's exit status")
    parser.add_argument("--derive-s", type=float, default=None)
    parser.add_argument("--train-s", type=float, default=None)
    parser.add_argument("--device", default="cuda", help="the device the config was derived for")
    args = parser.parse_args()

    import torch

    from air.rehearsal.trainer_report import fixed_sample, latest_broadcast, read_steps

    result: dict = {
        "pin": args.pin,
        "device": args.device,
        "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "trainer_rc": args.rc,
        "wall_s": {"derive": args.derive_s, "train": args.train_s},
        "problems": [],
    }
    steps = read_steps(args.probe)
    result["steps"] = [dataclasses.asdict(step) for step in steps]
    if args.rc != 0:
        result["problems"].append(f"the trainer exited with status {args.rc}")
    if len(steps) < STEPS:
        result["problems"].append(f"{len(steps)} of {STEPS} steps in {args.probe}")
    for step in steps:
        if not math.isfinite(step.loss) or not step.params_finite:
            result["problems"].append(f"step {step.step}: loss {step.loss}, parameters finite: {step.params_finite}")
        if step.changed_tensors == 0:
            result["problems"].append(f"step {step.step}: no trainable tensor changed")

    broadcast = latest_broadcast(args.run_dir)
    result["broadcast"] = str(broadcast) if broadcast else None
    try:
        samples = first_batch_samples(args.pin, args.run_dir)
        trained = sorted((s for s in samples if any(s.mask[1:])), key=lambda s: s.step)
        if broadcast is None:
            result["problems"].append(f"no finished broadcast under {args.run_dir / 'broadcasts'}")
            result["fixed_sample"] = None
        elif not trained:
            result["problems"].append("no trained sample in the recorded batches")
            result["fixed_sample"] = None
        else:
            first = trained[0]
            sample = fixed_sample(args.model, broadcast, first.step, first.token_ids, first.mask)
            result["fixed_sample"] = {**dataclasses.asdict(sample), "changed": sample.changed}
            if not sample.changed:
                result["problems"].append("the fixed sample's mean logprob did not move")
    except Exception as exc:  # the JSON is written whatever failed here
        result["fixed_sample"] = None
        result["problems"].append(f"fixed sample: {type(exc).__name__}: {exc}")
        traceback.print_exc()

    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(jsonable(result), indent=2) + "\n")

    print(f"== {args.pin}: {result['gpu'] or 'no GPU'}, torch {result['torch']}, trainer rc {args.rc}, "
          f"derive {args.derive_s} s, train {args.train_s} s")  # fmt: skip
    for step in steps:
        memory = "-" if step.peak_memory_gib is None else f"{step.peak_memory_gib:.2f} GiB"
        print(
            f"   step {step.step}: loss {step.loss:.5g}, grad norm {step.grad_norm:.3g}, "
            f"max change {step.max_param_change:.3g}, changed {step.changed_tensors}/{step.trainable_tensors}, "
            f"samples {step.samples}, loss tokens {step.loss_tokens}, peak {memory}, step {step.step_time_s or 0:.1f} s"
        )
    sample = result.get("fixed_sample")
    if sample:
        print(
            f"   fixed sample (step {sample['step']}, {sample['tokens']} tokens): mean logprob "
            f"{sample['logprob_before']:.6f} -> {sample['logprob_after']:.6f} under {sample['broadcast']}"
        )
    for problem in result["problems"]:
        print(f"   PROBLEM: {problem}")
    print(f"   -> {args.out}")
    return 1 if result["problems"] else 0


if __name__ == "__main__":
    sys.exit(main())
