"""The served model writing its replies: continuous batching on the CPU, as vLLM batches on a GPU.

Every request becomes one sequence per choice. One worker thread runs the model: at each step it admits
what arrived meanwhile (their prompts prefilled together, their key-value caches left-padded into the
running batch), then advances every running sequence by one token in one forward pass, and lets go of
the sequences that finished. A request that arrives while others generate therefore joins them at the
next token instead of waiting for the whole batch to end. Sequences of different weights (a LoRA adapter
a request names, weights loaded while others still generate) run as separate batches, each with the
model it started on.

A sequence ends as vLLM ends it: an end-of-turn token (kept in its token ids, not in its text), one of
the request's stop token ids or stop strings (the text cut before the string), ``max_tokens``, or a full
context. Each token's logprob is the processed one it was drawn from (:mod:`air.serving.sampling`).
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from air.serving.sampling import SamplingParams, draw, processed_logprobs, sequence_seed
from air.serving.token_scorer import PromptTooLong, ScoredCompletion, TokenScorer, too_long_message

logger = logging.getLogger(__name__)

MAX_BATCH = 16  # sequences advanced together; more wait for a place (2 CPU cores gain little past 8-16)
MAX_PREFILL_TOKENS = 16384  # prompt tokens prefilled in one admission (padding included)


@dataclass
class Sequence:
    """One choice of one request, while it generates."""

    job: Job
    choice: int
    generator: Any  # torch.Generator: this sequence's draws
    length: int  # tokens it holds so far (prompt and generated), its next position
    next_token: int = -1  # drawn, not yet fed to the model
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    top: list[list[tuple[int, float]]] = field(default_factory=list)
    finish_reason: str | None = None
    stop_reason: str | int | None = None
    text: str | None = None


@dataclass
class Job:
    prompt_ids: list[int]
    params: SamplingParams
    model_name: str | None
    n: int
    future: Future
    done: list[ScoredCompletion | None] = field(default_factory=list)


@dataclass
class Batch:
    """Sequences that share one model and one key-value cache (left-padded to a common length)."""

    model: Any
    sequences: list[Sequence]
    cache: Any  # transformers' DynamicCache
    mask: Any  # [rows, cached length]: 1 where a row holds a token


@dataclass
class EngineStats:
    requests: int = 0
    sequences: int = 0
    forward_passes: int = 0
    generated_tokens: int = 0
    prompt_tokens: int = 0
    largest_batch: int = 0


class GenerationEngine:
    """Generates with the scorer's model (and its loaded adapters) from a worker thread."""

    def __init__(self, scorer: TokenScorer, seed: int = 0, max_batch: int = MAX_BATCH) -> None:
        self.scorer = scorer
        self.max_batch = max_batch
        self.stats = EngineStats()
        self._rng = random.Random(seed)  # unseeded requests draw their generators' seeds from it
        self._waiting: list[Job] = []
        self._batches: list[Batch] = []
        self._wake = threading.Condition()
        self._closed = False
        ends = {scorer.eos_id, scorer.tokenizer.eos_token_id}
        generation_config = getattr(scorer.model, "generation_config", None)
        configured = getattr(generation_config, "eos_token_id", None)
        ends.update(configured if isinstance(configured, list) else [configured])
        self.end_ids = frozenset(int(token) for token in ends if token is not None)
        # Last: the worker reads everything above.
        self._thread = threading.Thread(target=self._run, name="generation-engine", daemon=True)
        self._thread.start()

    # ------------------------------------------------------------------ asking

    def submit(
        self, prompt_ids: list[int], params: SamplingParams, model_name: str | None = None, n: int = 1
    ) -> Future:
        """A future of ``n`` completions of ``prompt_ids``; raises PromptTooLong at once, as vLLM's 400."""
        if len(prompt_ids) >= self.scorer.max_model_len:
            raise PromptTooLong(too_long_message(self.scorer.max_model_len, len(prompt_ids)))
        if not prompt_ids:
            raise ValueError("a prompt of no tokens has nothing to continue")
        job = Job(list(prompt_ids), params, model_name, n, Future(), [None] * n)
        with self._wake:
            if self._closed:
                raise RuntimeError("the generation engine is closed")
            self._waiting.append(job)
            self.stats.requests += 1
            self._wake.notify()
        return job.future

    async def generate(
        self, prompt_ids: list[int], params: SamplingParams, model_name: str | None = None, n: int = 1
    ) -> list[ScoredCompletion]:
        return await asyncio.wrap_future(self.submit(prompt_ids, params, model_name, n))

    def close(self) -> None:
        with self._wake:
            self._closed = True
            self._wake.notify()
        self._thread.join(timeout=30)

    # ------------------------------------------------------------------ the worker

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._waiting and not self._batches and not self._closed:
                    self._wake.wait()
                if self._closed:
                    failed, self._waiting = self._waiting + [s.job for b in self._batches for s in b.sequences], []
                    self._batches = []
                    break
                room = self.max_batch - sum(len(batch.sequences) for batch in self._batches)
                admitted = self._take(room)
            try:
                if admitted:
                    self._admit(admitted)
                for batch in list(self._batches):
                    self._step(batch)
            except Exception as exc:  # a model failure fails what it was generating, not the server
                logger.exception("generation failed")
                jobs = {id(s.job): s.job for b in self._batches for s in b.sequences}
                jobs.update({id(job): job for job in admitted})
                self._batches = []
                for job in jobs.values():
                    if not job.future.done():
                        job.future.set_exception(RuntimeError(f"generation failed: {type(exc).__name__}: {exc}"))
        for job in failed:
            if not job.future.done():
                job.future.set_exception(RuntimeError("the generation engine was closed"))

    def _take(self, room: int) -> list[Job]:
        """Whole requests that fit in ``room`` sequences and the prefill budget, oldest first (at least one
        when nothing runs, so a request larger than the batch still runs alone)."""
        taken, tokens = [], 0
        while self._waiting:
            job = self._waiting[0]
            cost = job.n * len(job.prompt_ids)
            fits = job.n <= room and tokens + cost <= MAX_PREFILL_TOKENS
            if not fits and (taken or self._batches):
                break
            taken.append(self._waiting.pop(0))
            room, tokens = room - job.n, tokens + cost
        return taken

    def _admit(self, jobs: list[Job]) -> None:
        """Prefill the new requests' prompts together and add their sequences to their model's batch."""
        import torch

        by_model: dict[int, tuple[Any, list[Sequence]]] = {}
        for job in jobs:
            model = self.scorer.model_for(job.model_name)
            for choice in range(job.n):
                seeded = job.params.seed is not None
                seed = sequence_seed(job.params.seed, choice) if seeded else self._rng.getrandbits(63)
                sequence = Sequence(job, choice, torch.Generator().manual_seed(seed), len(job.prompt_ids))
                by_model.setdefault(id(model), (model, []))[1].append(sequence)
            self.stats.prompt_tokens += job.n * len(job.prompt_ids)
        for model, sequences in by_model.values():
            width = max(s.length for s in sequences)
            ids = torch.tensor([[0] * (width - s.length) + s.job.prompt_ids for s in sequences])
            mask = torch.tensor([[0] * (width - s.length) + [1] * s.length for s in sequences])
            logits, cache = self._forward(model, ids, mask, (mask.cumsum(1) - 1).clamp(min=0), None)
            self._pick(sequences, logits)
            self._join(model, sequences, cache, mask)

    def _step(self, batch: Batch) -> None:
        """Feed every sequence its last token, draw the next, release the finished ones."""
        import torch

        ids = torch.tensor([[s.next_token] for s in batch.sequences])
        positions = torch.tensor([[s.length - 1] for s in batch.sequences])
        batch.mask = torch.cat([batch.mask, torch.ones(len(batch.sequences), 1, dtype=batch.mask.dtype)], dim=1)
        logits, batch.cache = self._forward(batch.model, ids, batch.mask, positions, batch.cache)
        self._pick(batch.sequences, logits)
        self._release(batch)

    def _forward(self, model, ids, mask, positions, cache):
        import torch
        from transformers import DynamicCache

        with self.scorer.forward_lock, torch.inference_mode():
            output = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                past_key_values=cache if cache is not None else DynamicCache(),
                use_cache=True,
            )
        self.stats.forward_passes += 1
        return output.logits[:, -1].float(), output.past_key_values

    def _pick(self, sequences: list[Sequence], logits) -> None:
        """Draw each sequence's next token from the last logits and record it; mark the finished."""
        import torch

        params = [s.job.params for s in sequences]
        logprobs = processed_logprobs(logits, params)  # greedy rows: unscaled, as vLLM reports them
        tokens = draw(logprobs, params, [s.generator for s in sequences])
        for row, (sequence, token) in enumerate(zip(sequences, tokens, strict=True)):
            sequence.token_ids.append(token)
            sequence.logprobs.append(float(logprobs[row, token]))
            if sequence.job.params.top_logprobs:
                values, indices = torch.topk(logprobs[row], sequence.job.params.top_logprobs)
                sequence.top.append([(int(i), float(v)) for i, v in zip(indices, values, strict=True)])
            sequence.next_token = token
            sequence.length += 1
            self.stats.generated_tokens += 1
            self._check_end(sequence, token)

    def _check_end(self, sequence: Sequence, token: int) -> None:
        params = sequence.job.params
        if token in params.stop_token_ids:
            sequence.finish_reason, sequence.stop_reason = "stop", token
        elif token in self.end_ids and not params.ignore_eos:
            sequence.finish_reason = "stop"
        elif params.stop:
            text = self.scorer.tokenizer.decode(sequence.token_ids, skip_special_tokens=True)
            found = [(text.find(stop), stop) for stop in params.stop if stop and stop in text]
            if found:
                at, stop = min(found)
                cut = at + len(stop) if params.include_stop_str_in_output else at
                sequence.finish_reason, sequence.stop_reason, sequence.text = "stop", stop, text[:cut]
        if sequence.finish_reason is None:
            full = sequence.length >= self.scorer.max_model_len
            if full or (params.max_tokens is not None and len(sequence.token_ids) >= params.max_tokens):
                sequence.finish_reason = "length"

    def _join(self, model, sequences: list[Sequence], cache, mask) -> None:
        """Add prefilled sequences to the running batch of their model (a new batch if there is none)."""
        import torch

        batch = next((b for b in self._batches if b.model is model), None)
        if batch is None:
            batch = Batch(model, [], cache, mask)
            batch.sequences = sequences
            self._batches.append(batch)
        else:
            width = max(batch.mask.shape[1], mask.shape[1])
            layers = []
            for old, new in zip(cache_layers(batch.cache), cache_layers(cache), strict=True):
                layers.append(
                    tuple(torch.cat([pad_left(a, width), pad_left(b, width)]) for a, b in zip(old, new, strict=True))
                )
            set_cache_layers(batch.cache, layers)
            batch.mask = torch.cat([pad_left(batch.mask, width, dim=1), pad_left(mask, width, dim=1)])
            batch.sequences += sequences
        self.stats.largest_batch = max(self.stats.largest_batch, len(batch.sequences))
        self._release(batch)

    def _release(self, batch: Batch) -> None:
        """Hand finished sequences to their requests; keep the rest, their cache cut to what they use."""
        import torch

        finished = [s for s in batch.sequences if s.finish_reason is not None]
        if not finished:
            return
        for sequence in finished:
            self._finish(sequence)
        keep = [i for i, s in enumerate(batch.sequences) if s.finish_reason is None]
        if not keep:
            self._batches.remove(batch)
            return
        rows = torch.tensor(keep)
        mask = batch.mask[rows]
        start = int(mask.any(dim=0).nonzero()[0])  # columns no remaining row uses are padding now
        set_cache_layers(batch.cache, [(k[rows, :, start:], v[rows, :, start:]) for k, v in cache_layers(batch.cache)])
        batch.mask = mask[:, start:]
        batch.sequences = [batch.sequences[i] for i in keep]

    def _finish(self, sequence: Sequence) -> None:
        job, tokenizer = sequence.job, self.scorer.tokenizer
        text = sequence.text
        if text is None:
            text = tokenizer.decode(sequence.token_ids, skip_special_tokens=True)
        job.done[sequence.choice] = ScoredCompletion(
            prompt_ids=job.prompt_ids,
            token_ids=sequence.token_ids,
            logprobs=sequence.logprobs,
            tokens=self.scorer.token_texts(sequence.token_ids),
            text=text,
            finish_reason=sequence.finish_reason or "length",
            stop_reason=sequence.stop_reason,
            top_logprobs=[self.alternatives(top) for top in sequence.top] if job.params.top_logprobs else None,
        )
        self.stats.sequences += 1
        if all(done is not None for done in job.done) and not job.future.done():
            job.future.set_result(list(job.done))

    def alternatives(self, top: list[tuple[int, float]]) -> list[tuple[str, int, float]]:
        """(text, id, logprob) of one position's best tokens, their texts decoded in one call."""
        texts = self.scorer.token_texts([token for token, _ in top])
        return [(text, token, value) for text, (token, value) in zip(texts, top, strict=True)]


# ---------------------------------------------------------------------- the key-value cache


def cache_layers(cache) -> list[tuple[Any, Any]]:
    """(keys, values) of each layer, each [rows, heads, length, head size]."""
    return [(layer.keys, layer.values) for layer in cache.layers]


def set_cache_layers(cache, layers: list[tuple[Any, Any]]) -> None:
    for layer, (keys, values) in zip(cache.layers, layers, strict=True):
        layer.keys, layer.values = keys, values


def pad_left(tensor, width: int, dim: int = 2):
    """``tensor`` with zeros before its entries along ``dim`` up to ``width`` (padding the mask ignores)."""
    import torch

    missing = width - tensor.shape[dim]
    if missing <= 0:
        return tensor
    shape = list(tensor.shape)
    shape[dim] = missing
    return torch.cat([torch.zeros(shape, dtype=tensor.dtype), tensor], dim=dim)


__all__ = ["EngineStats", "GenerationEngine", "MAX_BATCH"]
