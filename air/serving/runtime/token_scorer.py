"""Token ids and honest logprobs for a scripted reply, the way vLLM would report them.

A scripted policy decides the text; this module turns the conversation and that text into what vLLM
returns for it: the prompt's token ids (the chat template applied to a string, then encoded without
special tokens, as vLLM's chat endpoint does), the completion's token ids (the reply encoded, plus the
end-of-turn token when it stopped on its own, cut at ``max_tokens`` otherwise) and each completion
token's logprob under a real model by teacher forcing, after temperature scaling (prime-rl runs vLLM
with ``logprobs_mode = processed_logprobs``, and its trainer divides its logits by the same
temperature), so a trainer holding the same weights starts with an importance ratio of 1.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air.serving.models.tiny_model import EOS_TOKEN, TinyModelError, require_extra


class PromptTooLong(ValueError):
    """The prompt does not fit the model's context (vLLM answers HTTP 400 with this wording)."""


@dataclass
class ScoredCompletion:
    prompt_ids: list[int]
    token_ids: list[int]
    logprobs: list[float]
    tokens: list[str]  # each token as text (vLLM's logprobs.content[i].token)
    text: str  # the completion decoded from token_ids without special tokens, as vLLM returns it
    finish_reason: str  # "stop" (ended with the end-of-turn token) or "length" (cut at max_tokens)
    stop_reason: str | int | None = None  # the stop string or stop token id that ended it (vLLM's field)
    top_logprobs: list[list[tuple[str, int, float]]] | None = None  # per token: its best alternatives
    prompt_logprobs: list[float] | None = None  # log p(prompt token | those before it), from the second on


class TokenScorer:
    """A tokenizer and model loaded once from a model directory (``air tiny-model`` writes one)."""

    def __init__(self, model_dir: str | Path, max_model_len: int | None = None) -> None:
        require_extra()
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = Path(model_dir).expanduser().resolve()
        if not (self.model_dir / "config.json").is_file():
            raise TinyModelError(
                f"{self.model_dir} is not a model directory (no config.json); write one with "
                f"`air tiny-model {model_dir}`"
            )
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        if not self.tokenizer.chat_template:
            raise TinyModelError(f"the tokenizer in {self.model_dir} has no chat template")
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32).eval()
        self.max_model_len = max_model_len or int(self.model.config.max_position_embeddings)
        self.eos_id = self.tokenizer.convert_tokens_to_ids(EOS_TOKEN)
        if self.eos_id is None or self.eos_id == self.tokenizer.unk_token_id:
            self.eos_id = self.tokenizer.eos_token_id
        self.forward_lock = threading.Lock()  # one forward pass at a time: the CPU is shared with the rollouts
        self.adapters: dict[str, Any] = {}  # LoRA name -> the base model with that adapter merged in

    # ------------------------------------------------------------------ loaded updates

    def load_adapter(self, name: str, adapter_dir: str | Path) -> None:
        """Serve ``name`` as the base model with the LoRA adapter in ``adapter_dir`` (vLLM's LoRA load);
        raises :class:`air.serving.runtime.broadcast_loading.BroadcastLoadError` when it does not fit."""
        from air.serving.runtime.broadcast_loading import with_lora_adapter

        with self.forward_lock:
            base = self.model
        updated = with_lora_adapter(base, adapter_dir)
        with self.forward_lock:
            self.adapters[name] = updated

    def load_weights(self, weight_dir: str | Path) -> None:
        """Replace the served weights with the full weights in ``weight_dir`` (vLLM's weight update)."""
        from air.serving.runtime.broadcast_loading import with_full_weights

        with self.forward_lock:
            base = self.model
        updated = with_full_weights(base, weight_dir)
        with self.forward_lock:
            self.model = updated

    def model_for(self, name: str | None):
        """The model a request names: a loaded adapter, else the served (base) model."""
        return self.adapters.get(name, self.model) if name else self.model

    # ------------------------------------------------------------------ tokenization

    def render(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=add_generation_prompt)

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text, add_special_tokens=False)

    def prompt_ids(self, messages: list[dict[str, Any]], add_generation_prompt: bool = True) -> list[int]:
        return self.encode(self.render(messages, add_generation_prompt))

    def token_texts(self, ids: list[int]) -> list[str]:
        return [self.tokenizer.decode([token_id]) for token_id in ids]

    # ------------------------------------------------------------------ scoring

    def complete(
        self,
        prompt_ids: list[int],
        reply: str,
        max_tokens: int | None = None,
        temperature: float = 1.0,
        model: str | None = None,
    ) -> ScoredCompletion:
        """The reply as vLLM would have returned it after ``prompt_ids``, scored by the model."""
        if len(prompt_ids) >= self.max_model_len:
            raise PromptTooLong(too_long_message(self.max_model_len, len(prompt_ids)))
        room = self.max_model_len - len(prompt_ids)
        limit = room if max_tokens is None else min(max_tokens, room)
        ids = self.encode(reply) + [self.eos_id]
        finish_reason = "stop"
        if len(ids) > limit:
            ids, finish_reason = ids[:limit], "length"
        text_ids = ids[:-1] if finish_reason == "stop" else ids
        return ScoredCompletion(
            prompt_ids=list(prompt_ids),
            token_ids=ids,
            logprobs=self.logprobs(prompt_ids, ids, temperature, model),
            tokens=self.token_texts(ids),
            text=self.tokenizer.decode(text_ids, skip_special_tokens=True),
            finish_reason=finish_reason,
        )

    def logprobs(
        self, prompt_ids: list[int], completion_ids: list[int], temperature: float = 1.0, model: str | None = None
    ) -> list[float]:
        """log p(completion token | everything before it), from logits divided by ``temperature``
        (0 means greedy sampling; its logprobs are reported unscaled, as for temperature 1), under the
        model the name picks (:meth:`model_for`)."""
        if not completion_ids:
            return []
        if not prompt_ids:
            raise ValueError("a prompt of no tokens has nothing to predict its first token from")
        scale = temperature if temperature and temperature > 0 else 1.0
        sequence = [*prompt_ids, *completion_ids]
        with self.forward_lock:
            return next_token_logprobs(self.model_for(model), sequence, range(len(prompt_ids), len(sequence)), scale)


def too_long_message(max_model_len: int, prompt_tokens: int) -> str:
    """vLLM's wording (verifiers maps it to ``prompt_too_long``)."""
    return (
        f"This model's maximum context length is {max_model_len} tokens. However, your request "
        f"has {prompt_tokens} input tokens. Please reduce the length of the input messages."
    )


def next_token_logprobs(model, token_ids: list[int], positions, temperature: float = 1.0) -> list[float]:
    """log p(token_ids[i] | token_ids[:i]) under ``model`` for each i in ``positions`` (each at least 1),
    from the logits divided by ``temperature``: one forward pass over the whole sequence (teacher forcing)."""
    import torch

    positions = list(positions)
    with torch.inference_mode():
        logits = model(input_ids=torch.tensor([token_ids])).logits[0].float()
        # The logits at position i - 1 predict token i.
        predicting = logits[torch.tensor(positions, dtype=torch.long) - 1] / temperature
        chosen = torch.tensor([token_ids[i] for i in positions]).unsqueeze(1)
        return torch.log_softmax(predicting, dim=-1).gather(1, chosen).squeeze(1).tolist()
