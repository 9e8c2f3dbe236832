"""How the served model picks its next token, as vLLM samples (temperature, top-k, top-p, seeds).

The logprob a reply carries is the one the token was drawn from: the logits divided by the temperature,
then cut by top-k and top-p and renormalised (vLLM's ``processed_logprobs``, the mode prime-rl runs
vLLM in; its trainer divides its own logits by the same temperature). Temperature 0 is greedy: the
most likely token, reported with its unscaled logprob, as vLLM reports greedy draws. A request's seed
makes its draws its own, whatever else shares the batch (one generator per sequence).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

GREEDY_BELOW = 1e-5  # vLLM's _SAMPLING_EPS: a temperature under it samples greedily


@dataclass(frozen=True)
class SamplingParams:
    """One request's sampling, already checked (see ``air.serving.vllm_api.VllmSampling``)."""

    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0 (or vLLM's -1): every token
    max_tokens: int | None = None  # None: until the context is full
    stop: tuple[str, ...] = ()
    stop_token_ids: tuple[int, ...] = ()
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    seed: int | None = None
    top_logprobs: int = 0  # how many alternatives each token reports (OpenAI's top_logprobs)
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW


def sequence_seed(seed: int, choice: int) -> int:
    """The seed of one sequence of a seeded request (choice i of n gets its own stream)."""
    digest = hashlib.sha256(f"{seed}:{choice}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def processed_logprobs(logits, params: list[SamplingParams]):
    """Each row's log-distribution to draw from: ``logits`` [rows, vocab] (float32) divided by the row's
    temperature (greedy rows: unscaled), top-k then top-p applied as vLLM applies them, renormalised."""
    import torch

    temperatures = torch.tensor([1.0 if p.greedy else p.temperature for p in params], dtype=logits.dtype)
    scaled = logits / temperatures.unsqueeze(1)
    if any(p.top_k > 0 and not p.greedy for p in params):
        vocab = scaled.shape[1]
        ks = torch.tensor([p.top_k if p.top_k > 0 and not p.greedy else vocab for p in params])
        kth = torch.sort(scaled, dim=1, descending=True).values.gather(1, (ks.clamp(max=vocab) - 1).unsqueeze(1))
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if any(p.top_p < 1.0 and not p.greedy for p in params):
        top_ps = torch.tensor([p.top_p if not p.greedy else 1.0 for p in params], dtype=logits.dtype)
        ascending, order = torch.sort(scaled, dim=1)
        cumulative = ascending.softmax(dim=1).cumsum(dim=1)
        # vLLM: drop the least likely tokens while what they add up to stays within 1 - top_p; keep the best.
        drop = cumulative <= (1 - top_ps).unsqueeze(1)
        drop[:, -1] = False
        scaled = scaled.scatter(1, order, ascending.masked_fill(drop, float("-inf")))
    return torch.log_softmax(scaled, dim=1)


def draw(logprobs, params: list[SamplingParams], generators: list) -> list[int]:
    """One token per row: the argmax for greedy rows, else a draw from the row's own generator."""
    import torch

    tokens = []
    for row, (sampling, generator) in enumerate(zip(params, generators, strict=True)):
        if sampling.greedy:
            tokens.append(int(torch.argmax(logprobs[row])))
        else:
            tokens.append(int(torch.multinomial(logprobs[row].exp(), 1, generator=generator)))
    return tokens


__all__ = ["GREEDY_BELOW", "SamplingParams", "draw", "processed_logprobs", "sequence_seed"]
