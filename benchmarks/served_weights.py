"""Does prime-rl's vLLM serve what its trainer sent? Fixed texts' per-token logprobs, served against trained.

    uv run python benchmarks/served_weights.py --prime-rl DIR --run RUN [--steps 1 12 24] [--json]

RUN: a folder an ``rl`` run of today's prime-rl wrote (``<output-dir>/<run>``: configs/inference.json,
broadcasts/step_N). Starts prime-rl's ``inference`` on the run's own inference config (the base weights), then
for the base and each broadcast step asked for (loaded by prime-rl's route, ``POST /update_weights``): the
served logprobs of rigs/served_vs_trained.py's fixed texts against the same weights run in transformers, in the
sampler's dtype. Each broadcast is also loaded once more rounded to bfloat16 (what both pins sent before
air_prime_rl.served_weights): how far that rounding alone moves the served logprobs from the trainer's.
Prints one row per load: max and mean |served - trained| per token, and whether it is within the tolerance.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from air.launch.prime_rl import cpu_venv  # noqa: E402
from rigs.prime_rl_inference import inference_server, load_weights  # noqa: E402
from rigs.served_vs_trained import TOLERANCE, compare  # noqa: E402


def rounded_to_bfloat16(venv: Path, weights: Path, into: Path) -> Path:
    """A copy of a broadcast folder with every tensor rounded to bfloat16 (prime-rl's own default before)."""
    into.mkdir(parents=True, exist_ok=True)
    for item in weights.iterdir():
        if item.suffix != ".safetensors" and item.is_file():
            shutil.copy2(item, into / item.name)
    script = (
        "import sys, torch; from safetensors.torch import load_file, save_file\n"
        "from pathlib import Path\n"
        "for f in Path(sys.argv[1]).glob('*.safetensors'):\n"
        "    t = {k: v.to(torch.bfloat16).clone() for k, v in load_file(str(f)).items()}\n"
        "    save_file(t, str(Path(sys.argv[2]) / f.name), metadata={'format': 'pt'})\n"
    )
    subprocess.run([str(venv / "bin" / "python"), "-c", script, str(weights), str(into)], check=True)
    return into


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--prime-rl", required=True)
    parser.add_argument("--run", required=True, help="<output-dir>/<run> of an rl run")
    parser.add_argument("--steps", type=int, nargs="*", help="broadcast steps (default: the last)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    venv = cpu_venv(Path(args.prime_rl).expanduser().resolve())
    run = Path(args.run).resolve()
    config = json.loads((run / "configs" / "inference.json").read_text())
    model = Path((config.get("model") or {}).get("name") or config["vllm"]["model"])
    broadcasts = run / "broadcasts"
    found = sorted(int(p.name.removeprefix("step_")) for p in broadcasts.glob("step_*") if (p / "STABLE").exists())
    steps = args.steps or found[-1:]
    if set(steps) - set(found):
        raise SystemExit(f"{broadcasts}: no complete broadcast for step(s) {sorted(set(steps) - set(found))}; "
                         f"there are {found}")  # fmt: skip
    rows = []
    with (
        tempfile.TemporaryDirectory() as scratch,
        inference_server(venv, run / "configs" / "inference.json", run / "served_weights.log", startup_s=900) as base,
    ):
        rows.append({"load": "base", **compare(base, venv, model, None)})
        for step in steps:
            weights = broadcasts / f"step_{step}"
            load_weights(base, weights)
            rows.append({"load": f"step_{step}", **compare(base, venv, model, weights)})
            rounded = rounded_to_bfloat16(venv, weights, Path(scratch) / f"bf16_{step}")
            load_weights(base, rounded)
            rows.append({"load": f"step_{step} as bfloat16", **compare(base, venv, model, weights)})
    if args.json:
        print(json.dumps(rows))
        return 0
    print(f"tolerance {TOLERANCE:g} nats per token; model {model}")
    for row in rows:
        verdict = "equal" if row["within_tolerance"] else "DIFFERENT"
        sums = f"sums served {row['served_sums']} trained {row['trained_sums']}"
        print(f"{row['load']:>22}: max {row['max_abs_diff']:.2e}, mean {row['mean_abs_diff']:.2e} over "
              f"{row['tokens']} tokens ({verdict}); {sums}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
