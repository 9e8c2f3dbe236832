"""`flash_attn_varlen_func` computed with torch's scaled-dot-product attention, one packed sample at a time.

prime-rl main's trainer config names only flash-attention implementations (`model.attn` takes
flash_attention_2/3/4 or auto); where flash-attn cannot be installed (a CPU machine, or a GPU without its
wheels) the rehearsal names `flash_attention_2` and puts this function where the model code looks for
flash-attn's. It takes flash-attn's varlen layout: q, k, v of shape [total_tokens, heads, head_dim] holding
several samples packed back to back, `cu_seqlens_*` their cumulative boundaries (int, starting at 0), and
attends causally within each sample only, never across samples. Grouped-query attention (fewer k/v heads
than q heads) is expanded as flash-attn does. Real compute, differentiable; stdlib and torch only.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int | None = None,
    max_seqlen_k: int | None = None,
    dropout_p: float = 0.0,
    softmax_scale: float | None = None,
    causal: bool = False,
    window_size: tuple[int, int] = (-1, -1),
    softcap: float = 0.0,
    alibi_slopes: torch.Tensor | None = None,
    deterministic: bool = False,
    return_attn_probs: bool = False,
    block_table: torch.Tensor | None = None,
) -> torch.Tensor:
    if window_size != (-1, -1) or softcap or alibi_slopes is not None or return_attn_probs or block_table is not None:
        raise NotImplementedError("the SDPA varlen stand-in supports plain (causal) attention only")
    if q.shape[1] % k.shape[1]:
        raise ValueError(f"{q.shape[1]} query heads are not a multiple of {k.shape[1]} key/value heads")
    bounds_q = [int(x) for x in cu_seqlens_q.tolist()]
    bounds_k = [int(x) for x in cu_seqlens_k.tolist()]
    if len(bounds_q) != len(bounds_k):
        raise ValueError("cu_seqlens_q and cu_seqlens_k name different numbers of samples")
    groups = q.shape[1] // k.shape[1]
    outputs = []
    spans_q = zip(bounds_q, bounds_q[1:], strict=False)
    spans_k = zip(bounds_k, bounds_k[1:], strict=False)
    for (q0, q1), (k0, k1) in zip(spans_q, spans_k, strict=True):
        if q1 == q0:
            continue
        # [1, heads, len, dim]: 4-D, so that torch may take its fused (flash) kernel, on the CPU too; with
        # 3-D inputs it falls back to the math kernel (about ten times slower on 4k-token samples).
        qs = q[q0:q1].transpose(0, 1).unsqueeze(0)
        ks = k[k0:k1].transpose(0, 1).repeat_interleave(groups, dim=0).unsqueeze(0)
        vs = v[k0:k1].transpose(0, 1).repeat_interleave(groups, dim=0).unsqueeze(0)
        mask = None
        if causal and q1 - q0 != k1 - k0:  # flash-attn aligns the causal mask to the bottom right
            rows = torch.arange(q1 - q0, device=q.device)[:, None] + (k1 - k0) - (q1 - q0)
            mask = rows >= torch.arange(k1 - k0, device=q.device)[None, :]
        out = F.scaled_dot_product_attention(
            qs,
            ks,
            vs,
            attn_mask=mask,
            dropout_p=dropout_p,
            is_causal=causal and mask is None,
            scale=softmax_scale,
        )
        outputs.append(out[0].transpose(0, 1))
    # Tokens past the last boundary (padding) get zeros, as flash-attn leaves them untouched.
    tail = q.shape[0] - bounds_q[-1]
    if tail > 0:
        outputs.append(q.new_zeros((tail, q.shape[1], v.shape[2])))
    return torch.cat(outputs, dim=0) if outputs else q.new_zeros((0, q.shape[1], v.shape[2]))
