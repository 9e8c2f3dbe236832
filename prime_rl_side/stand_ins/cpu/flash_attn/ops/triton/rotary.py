"""Import-only stand-in: vLLM 0.14 imports `apply_rotary` wherever a module named flash_attn is found, and
calls it only on CUDA (its CPU path computes the rotary embedding natively)."""


def apply_rotary(*args, **kwargs):
    raise NotImplementedError("flash_attn.ops.triton.rotary.apply_rotary needs CUDA; this is the CPU stand-in")
