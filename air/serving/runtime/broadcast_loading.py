"""What vLLM does with a trainer's weight broadcast, for the scripted server's tiny model.

prime-rl's trainer publishes each update as files and its orchestrator then asks the inference server to
load them: ``/load_lora_adapter`` with a folder holding a PEFT adapter (``adapter_config.json`` and
``adapter_model.safetensors``), or ``/update_weights`` with a folder of full weights (HF safetensors).
Here each becomes a copy of the base model with the update applied, so the logprobs the server returns
next come from the updated model, as vLLM's would. A broadcast that does not fit the model (a missing
file, a tensor that names no module, a shape that differs) raises :class:`BroadcastLoadError` naming it:
vLLM would refuse it too, and a trainer that writes unloadable broadcasts must not pass a rehearsal.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
# PEFT's names: base_model.model.<module path>.lora_A.weight (some writers add the adapter name).
LORA_KEY = re.compile(r"^(?:base_model\.model\.)?(?P<module>.+)\.lora_(?P<which>[AB])(?:\.[\w-]+)?\.weight$")


class BroadcastLoadError(ValueError):
    """A broadcast the server cannot load into its model; the message names the file and what is wrong."""


def read_safetensors(paths: list[Path]) -> dict[str, Any]:
    """Every tensor of the files; a tensor holding NaN or inf is refused (vLLM would serve garbage)."""
    from safetensors.torch import load_file

    tensors: dict[str, Any] = {}
    for path in paths:
        try:
            loaded = load_file(str(path))
        except (OSError, ValueError, RuntimeError) as exc:  # truncated or not safetensors at all
            raise BroadcastLoadError(f"{path}: not a readable safetensors file ({exc})") from None
        for key, tensor in loaded.items():
            if tensor.is_floating_point() and not bool(tensor.isfinite().all()):
                raise BroadcastLoadError(f"{path}: {key!r} holds NaN or inf")
        tensors.update(loaded)
    return tensors


def lora_scale(config: dict[str, Any], path: Path) -> float:
    try:
        rank, alpha = int(config["r"]), float(config.get("lora_alpha", config["r"]))
    except (KeyError, TypeError, ValueError):
        raise BroadcastLoadError(f"{path}: no LoRA rank `r` (and `lora_alpha`)") from None
    if rank <= 0:
        raise BroadcastLoadError(f"{path}: LoRA rank {rank} is not positive")
    return alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank


def with_lora_adapter(base, adapter_dir: str | Path):
    """A copy of ``base`` with the adapter in ``adapter_dir`` merged in (W + scale * B @ A)."""
    import torch

    folder = Path(adapter_dir)
    config_path, weights_path = folder / ADAPTER_CONFIG, folder / ADAPTER_WEIGHTS
    for needed in (config_path, weights_path):
        if not needed.is_file():
            raise BroadcastLoadError(f"{folder}: no {needed.name} (a LoRA broadcast holds {ADAPTER_CONFIG}, weights)")
    try:
        config = json.loads(config_path.read_text())
    except (OSError, ValueError) as exc:
        raise BroadcastLoadError(f"{config_path}: not readable JSON ({exc})") from None
    scale = lora_scale(config if isinstance(config, dict) else {}, config_path)
    pairs: dict[str, dict[str, Any]] = {}
    for key, tensor in read_safetensors([weights_path]).items():
        match = LORA_KEY.match(key)
        if match is None:
            raise BroadcastLoadError(f"{weights_path}: {key!r} is not a LoRA tensor (…lora_A.weight / …lora_B.weight)")
        pairs.setdefault(match["module"], {})[match["which"]] = tensor
    if not pairs:
        raise BroadcastLoadError(f"{weights_path}: holds no LoRA tensors")
    model = copy.deepcopy(base)
    modules = dict(model.named_modules())
    with torch.no_grad():
        for name, pair in sorted(pairs.items()):
            module = modules.get(name) or modules.get(name.removeprefix("model."))
            if module is None or not hasattr(module, "weight"):
                raise BroadcastLoadError(f"{weights_path}: the adapter's {name!r} is no layer of the model")
            if set(pair) != {"A", "B"}:
                raise BroadcastLoadError(f"{weights_path}: {name!r} has lora_{''.join(pair)} without its pair")
            delta = pair["B"].float() @ pair["A"].float()
            if delta.shape != module.weight.shape:
                raise BroadcastLoadError(
                    f"{weights_path}: {name!r} makes an update of shape {tuple(delta.shape)} for a weight of "
                    f"shape {tuple(module.weight.shape)}"
                )
            module.weight += (scale * delta).to(module.weight.dtype)
    return model.eval()


def with_full_weights(base, weight_dir: str | Path):
    """A copy of ``base`` holding the full weights in ``weight_dir`` (every tensor of the model, by name)."""
    folder = Path(weight_dir)
    files = sorted(folder.glob("*.safetensors")) if folder.is_dir() else []
    if not files:
        raise BroadcastLoadError(f"{folder}: no *.safetensors file (full weights are the model's tensors, by name)")
    tensors = read_safetensors(files)
    model = copy.deepcopy(base)
    expected = model.state_dict()
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise BroadcastLoadError(
            f"{folder}: the weights do not match the model: missing {missing[:3]}{'…' if len(missing) > 3 else ''}, "
            f"unexpected {unexpected[:3]}{'…' if len(unexpected) > 3 else ''}"
        )
    for key, tensor in tensors.items():
        if tuple(tensor.shape) != tuple(expected[key].shape):
            raise BroadcastLoadError(
                f"{folder}: {key!r} has shape {tuple(tensor.shape)}, the model's {tuple(expected[key].shape)}"
            )
    model.load_state_dict({key: tensor.to(expected[key].dtype) for key, tensor in tensors.items()})
    return model.eval()


__all__ = ["BroadcastLoadError", "with_full_weights", "with_lora_adapter"]
