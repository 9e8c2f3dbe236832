"""air_prime_rl/sdpa_varlen.py: flash-attn's varlen call computed by torch SDPA, one packed sample at a time.

Compared with naive causal attention written out per sample (softmax of masked scores), and checked not to
attend across packed samples: changing one sample's keys and values leaves every other sample's output as
it was.
"""

from __future__ import annotations

import math

import pytest

torch = pytest.importorskip("torch", reason="torch is not installed in this venv")

from air_prime_rl.sdpa_varlen import flash_attn_varlen_func  # noqa: E402


def naive_causal(q, k, v, lengths, scale=None):
    """Each sample alone: scores = q·kᵀ·scale, future positions masked, softmax, times v; GQA by repetition."""
    groups = q.shape[1] // k.shape[1]
    outputs, start = [], 0
    for length in lengths:
        qs, ks, vs = (t[start : start + length].double() for t in (q, k, v))
        ks, vs = ks.repeat_interleave(groups, dim=1), vs.repeat_interleave(groups, dim=1)
        scores = torch.einsum("qhd,khd->hqk", qs, ks) * (scale or 1 / math.sqrt(q.shape[-1]))
        future = torch.ones(length, length, dtype=torch.bool).triu(1)
        weights = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        outputs.append(torch.einsum("hqk,khd->qhd", weights, vs))
        start += length
    return torch.cat(outputs)


def packed(lengths, heads=4, kv_heads=2, dim=8, seed=0):
    generator = torch.Generator().manual_seed(seed)
    total = sum(lengths)
    q = torch.randn(total, heads, dim, generator=generator, dtype=torch.float64)
    k = torch.randn(total, kv_heads, dim, generator=generator, dtype=torch.float64)
    v = torch.randn(total, kv_heads, dim, generator=generator, dtype=torch.float64)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return q, k, v, cu


@pytest.mark.parametrize("lengths", [[7], [5, 1, 9, 3], [16, 16]])
@pytest.mark.parametrize("kv_heads", [4, 2, 1])
def test_matches_naive_causal_attention_per_sample(lengths, kv_heads):
    q, k, v, cu = packed(lengths, kv_heads=kv_heads)
    out = flash_attn_varlen_func(q, k, v, cu, cu, max(lengths), max(lengths), causal=True)
    assert out.shape == q.shape
    torch.testing.assert_close(out, naive_causal(q, k, v, lengths), rtol=1e-10, atol=1e-10)


def test_softmax_scale_is_used():
    q, k, v, cu = packed([6, 4])
    out = flash_attn_varlen_func(q, k, v, cu, cu, 6, 6, softmax_scale=0.3, causal=True)
    torch.testing.assert_close(out, naive_causal(q, k, v, [6, 4], scale=0.3), rtol=1e-10, atol=1e-10)


def test_does_not_attend_across_packed_samples():
    lengths = [5, 6, 4]
    q, k, v, cu = packed(lengths)
    out = flash_attn_varlen_func(q, k, v, cu, cu, 6, 6, causal=True)
    # Change the second sample's keys and values only: the first and third samples' outputs must not move.
    k2, v2 = k.clone(), v.clone()
    k2[5:11] += 3.0
    v2[5:11] -= 2.0
    out2 = flash_attn_varlen_func(q, k2, v2, cu, cu, 6, 6, causal=True)
    torch.testing.assert_close(out2[:5], out[:5], rtol=0, atol=0)
    torch.testing.assert_close(out2[11:], out[11:], rtol=0, atol=0)
    assert not torch.allclose(out2[5:11], out[5:11])
    # The whole pack attended as one causal sequence differs from the per-sample result.
    whole = naive_causal(q, k, v, [sum(lengths)])
    assert not torch.allclose(out[5:], whole[5:])


def test_is_causal_within_a_sample():
    q, k, v, cu = packed([8])
    out = flash_attn_varlen_func(q, k, v, cu, cu, 8, 8, causal=True)
    k2, v2 = k.clone(), v.clone()
    k2[6:] += 1.0
    v2[6:] += 1.0  # later positions change: earlier outputs must not
    out2 = flash_attn_varlen_func(q, k2, v2, cu, cu, 8, 8, causal=True)
    torch.testing.assert_close(out2[:6], out[:6], rtol=0, atol=0)


def test_gradients_flow_and_match_naive():
    lengths = [4, 7]
    q, k, v, cu = packed(lengths, kv_heads=2)
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    reference = [t.clone().requires_grad_() for t in (q, k, v)]
    flash_attn_varlen_func(*ours, cu, cu, 7, 7, causal=True).square().sum().backward()
    naive_causal(*reference, lengths).square().sum().backward()
    for a, b in zip(ours, reference, strict=True):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-9, atol=1e-9)


def test_float32_inputs_take_the_fast_path_and_stay_close():
    lengths = [300, 200]
    q, k, v, cu = packed(lengths, heads=4, kv_heads=2, dim=16)
    out = flash_attn_varlen_func(q.float(), k.float(), v.float(), cu, cu, 300, 300, causal=True)
    assert out.dtype == torch.float32
    torch.testing.assert_close(out.double(), naive_causal(q, k, v, lengths), rtol=1e-4, atol=1e-5)


def test_unsupported_options_raise():
    q, k, v, cu = packed([3])
    with pytest.raises(NotImplementedError):
        flash_attn_varlen_func(q, k, v, cu, cu, 3, 3, causal=True, window_size=(2, 0))
