"""A LoRA adapter in PEFT's layout for the tiny model, as prime-rl's trainer broadcasts one."""

from __future__ import annotations

import json
from pathlib import Path

TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
RANK, ALPHA = 4, 8


def write_adapter(folder: Path, base, seed: int = 1, extra: dict | None = None) -> dict:
    """A PEFT adapter for every projection of the model, with non-zero A and B."""
    import torch
    from safetensors.torch import save_file

    generator = torch.Generator().manual_seed(seed)
    tensors = {}
    for name, module in base.named_modules():
        if name.rsplit(".", 1)[-1] in TARGETS:
            out_features, in_features = module.weight.shape
            prefix = f"base_model.model.{name}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(RANK, in_features, generator=generator) * 0.05
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(out_features, RANK, generator=generator) * 0.05
    tensors.update(extra or {})
    folder.mkdir(parents=True, exist_ok=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    config = {"r": RANK, "lora_alpha": ALPHA, "target_modules": list(TARGETS), "peft_type": "LORA"}
    (folder / "adapter_config.json").write_text(json.dumps(config))
    return tensors
