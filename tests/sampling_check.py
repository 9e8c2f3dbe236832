"""What a sampled reply's logprobs must be, from an independent teacher-forced forward pass, and what prime-rl
sends with each request."""

from __future__ import annotations

import math

# What prime-rl's orchestrator sends with every rollout request (orchestrator/utils.py get_sampling_args).
PRIME_RL_EXTRA = {"return_token_ids": True, "top_k": -1, "min_p": 0.0, "min_tokens": 0, "repetition_penalty": 1.0}


def expected_logprobs(model, prompt_ids, token_ids, temperature=1.0, top_k=0, top_p=1.0) -> list[float]:
    """Each token's logprob as the sampler should have drawn it, from one teacher-forced pass: logits over
    the temperature, the top-k and the smallest set of tokens reaching top-p kept, renormalised."""
    import torch

    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([list(prompt_ids) + list(token_ids)])).logits[0].float()
    out = []
    for place, token in enumerate(token_ids):
        row = logits[len(prompt_ids) + place - 1] / (temperature or 1.0)
        probs = row.softmax(-1)
        order = torch.argsort(probs, descending=True)
        keep = torch.zeros_like(probs, dtype=torch.bool)
        total = 0.0
        for rank, index in enumerate(order.tolist()):
            if (top_k and rank >= top_k) or total >= top_p:
                break
            keep[index] = True
            total += float(probs[index])
        assert keep[token], f"token {token} at {place} was drawn from outside the kept set"
        out.append(math.log(float(probs[token]) / float(probs[keep].sum())))
    return out
