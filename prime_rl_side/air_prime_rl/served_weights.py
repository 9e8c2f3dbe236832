"""The policy that samples is the policy that trains: two fixes to prime-rl's weight route, applied by cpu_rl.

- The trainer's broadcast in float32 where the trainer computes in float32 (a CPU: rl_cpu*.toml, vLLM float32).
  Both pins gather the weights for a broadcast in bfloat16 by a default argument (c87c19b
  ``trainer.weights.gather_weights_on_master``, 559b447 ``utils.weights.gather_weights_parallel``): a float32
  vLLM then serves the trainer's weights rounded to bfloat16, a change to a token's logprob as large as a step's
  (experiments.md). The gather is asked for float32 on a CPU; on a GPU (bfloat16 compute and serving) nothing changes.
- A tied LM head that follows its embedding after a reload (559b447 with vLLM 0.26). Its layerwise reload loads
  each layer apart and processes a layer once all its weights arrived; vLLM skips ``lm_head.weight`` of a tied
  model, so the head's layer "failed to load" and was never processed again. Its parameter is the embedding's
  (one tensor, updated), but the CPU backend multiplies by a packed copy made when the layer was processed: the
  served head stayed the start model's (experiments.md: served logprobs equal transformers' with the head from
  the start weights, to 3e-5). After each load the head is tied again and processed anew.
"""

from __future__ import annotations

import functools
import sys


def broadcast_in_float32(weights_module, name: str) -> None:
    """The gather in float32; tensors that share memory (a tied head) copied apart, as the bfloat16 cast did,
    for safetensors refuses shared tensors (a float32 cast of float32 weights copies nothing)."""
    import torch

    gather = getattr(weights_module, name)

    @functools.wraps(gather)
    def gather_float32(*args, **kwargs):
        kwargs.setdefault("dtype", torch.float32)
        state = gather(*args, **kwargs)
        seen: set[int] = set()
        for key, tensor in list(state.items()):
            if isinstance(tensor, torch.Tensor) and tensor.device.type != "meta":
                pointer = tensor.untyped_storage().data_ptr()
                if pointer in seen:
                    state[key] = tensor.clone()
                seen.add(pointer)
        return state

    setattr(weights_module, name, gather_float32)


def retie_lm_head(model) -> bool:
    """Make a tied model's LM head serve its embedding's current values; True where it had to."""
    config = getattr(model, "config", None)
    head = getattr(model, "lm_head", None)
    embed = getattr(getattr(model, "model", None), "embed_tokens", None)
    if not getattr(config, "tie_word_embeddings", False) or head is None or embed is None:
        return False
    if getattr(head, "weight", None) is not embed.weight and head.weight.shape == embed.weight.shape:
        head.weight = embed.weight
    # vLLM's CPU backend multiplies by a copy it packs once a layer is processed (oneDNN); the head's layer is
    # never processed again on a reload (nothing was loaded into it), so its copy keeps the values it had.
    method = getattr(head, "quant_method", None)
    if method is not None and hasattr(method, "process_weights_after_loading"):
        method.process_weights_after_loading(head)
    return True


def retie_after_reload(filesystem_module) -> None:
    load = filesystem_module.load_weights_checkpoint_layerwise

    @functools.wraps(load)
    def load_then_retie(model, *args, **kwargs):
        load(model, *args, **kwargs)
        if retie_lm_head(model):
            print("[air_prime_rl.served_weights] tied LM head processed anew", file=sys.stderr, flush=True)

    filesystem_module.load_weights_checkpoint_layerwise = load_then_retie
