"""A decoy broadcast: every floating-point tensor of a broadcast folder scaled by one factor, written in the same
layout (its safetensors files, anything else copied, a STABLE marker). Loaded by prime-rl's route before the
trainer's own broadcast, it makes "the server now serves the trainer's weights" a check that can fail whatever
the run learned: a load that skips a tensor leaves that tensor scaled (tests/rehearsal/test_rl_cpu_e2e.py).

    python -m air_prime_rl.scaled_weights SOURCE_DIR TARGET_DIR FACTOR
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file


def write_scaled(source: Path, target: Path, factor: float) -> int:
    """Scales every floating-point tensor; returns how many it scaled."""
    target.mkdir(parents=True, exist_ok=True)
    scaled = 0
    for item in sorted(source.iterdir()):
        if item.suffix == ".safetensors":
            tensors = load_file(item)
            for name, tensor in tensors.items():
                if tensor.is_floating_point():
                    tensors[name] = (tensor * factor).to(tensor.dtype).contiguous()
                    scaled += 1
            save_file(tensors, target / item.name, metadata={"format": "pt"})
        elif item.is_file() and item.name != "STABLE":
            shutil.copy2(item, target / item.name)
    if not scaled:
        raise SystemExit(f"{source}: no floating-point tensor in its .safetensors files")
    (target / "STABLE").touch()
    return scaled


if __name__ == "__main__":
    source, target, factor = Path(sys.argv[1]), Path(sys.argv[2]), float(sys.argv[3])
    print(write_scaled(source, target, factor))
