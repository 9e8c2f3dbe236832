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
context. Each token's logprob is the processed one it was drawn from (:mod:`air.serving.runtime.sampling`).

A request is bounded by the engine's progress, not by a wall clock (:mod:`air.serving.runtime.engine_progress`);
one its caller gives up on leaves the batch at the next token; :meth:`GenerationEngine.close` waits for the
forward pass in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import threading
import time
from concurrent.futures import Future, InvalidStateError
from dataclasses import dataclass, field
from typing import Any

from air.serving.runtime.engine_progress import EngineStalled, Progress
from air.serving.runtime.kv_cache import cache_layers, pad_left, set_cache_layers
from air.serving.runtime.sampling import SamplingParams, draw, processed_logprobs, sequence_seed
from air.serving.runtime.token_scorer import PromptTooLong, ScoredCompletion, TokenScorer, too_long_message

logger = logging.getLogger(__name__)

MAX_BATCH = 16  # sequences advanced together; more wait for a place (2 CPU cores gain little past 8-16)
MAX_PREFILL_TOKENS = 16384  # prompt tokens prefilled in one admission (padding included)
STUCK_S = 60.0  # close() leaves a worker behind that used no CPU for this long (hung, not slow)
POLL_S = 1.0  # how often a waiting request looks at the engine's progress (at most)


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


@dataclass(eq=False)  # a request is itself, whatever its fields
class Job:
    prompt_ids: list[int]
    params: SamplingParams
    model_name: str | None
    n: int
    future: Future
    done: list[ScoredCompletion | None] = field(default_factory=list)
    submitted: float = field(default_factory=time.monotonic)

    @property
    def dropped(self) -> bool:
        """Its caller gave up on it (its future ended before its sequences did)."""
        return self.future.done() and any(done is None for done in self.done)


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
        self.progress = Progress(self._thread)  # before any request: only requests make the worker pass

    # ------------------------------------------------------------------ asking

    def submit(
        self, prompt_ids: list[int], params: SamplingParams, model_name: str | None = None, n: int = 1
    ) -> Future:
        """A future of ``n`` completions of ``prompt_ids``; raises PromptTooLong at once, as vLLM's 400."""
        return self._submit(prompt_ids, params, model_name, n).future

    def _submit(self, prompt_ids: list[int], params: SamplingParams, model_name: str | None, n: int) -> Job:
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
        return job

    async def generate(
        self,
        prompt_ids: list[int],
        params: SamplingParams,
        model_name: str | None = None,
        n: int = 1,
        stall_s: float | None = None,
    ) -> list[ScoredCompletion]:
        """The completions; EngineStalled when the engine made no progress for ``stall_s`` seconds (None:
        wait while it lives). A caller that stops waiting (cancelled) takes its request out of the batch."""
        job = self._submit(prompt_ids, params, model_name, n)
        waiting = asyncio.wrap_future(job.future)
        try:
            while True:
                poll = POLL_S if stall_s is None else min(POLL_S, stall_s / 4)
                done, _ = await asyncio.wait({waiting}, timeout=poll)
                if done:
                    return waiting.result()
                if not self._thread.is_alive():
                    raise RuntimeError("the generation engine stopped")
                idle = time.monotonic() - max(job.submitted, self.progress.last())
                if stall_s is not None and idle >= stall_s:
                    raise EngineStalled(
                        f"the model made no progress for {idle:.0f} s (no forward pass ended, its engine used no CPU)"
                    )
        finally:
            self.drop(job)

    def drop(self, job: Job) -> None:
        """Forget a request nobody waits for any more: out of the queue now, out of its batch at the next token."""
        with self._wake:
            if job in self._waiting:
                self._waiting.remove(job)
        job.future.cancel()  # a no-op once it has its outcome

    def close(self) -> None:
        """Fail what waits, and return once the worker has ended: after the forward pass in flight, however
        long that takes while it progresses; a worker without progress for STUCK_S is left behind, warned."""
        with self._wake:
            self._closed = True
            self._wake.notify()
        if not self.progress.wait_for_end(STUCK_S, POLL_S):
            logger.warning("the generation engine is stuck (no progress for %.0f s); leaving it behind", STUCK_S)

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
                    settle(job.future, error=RuntimeError(f"generation failed: {type(exc).__name__}: {exc}"))
        for job in failed:
            settle(job.future, error=RuntimeError("the generation engine was closed"))

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
        self.progress.pass_ended()
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

        finished = [s for s in batch.sequences if s.finish_reason is not None or s.job.dropped]
        if not finished:
            return
        for sequence in finished:
            if not sequence.job.future.done():
                self._finish(sequence)
        keep = [i for i, s in enumerate(batch.sequences) if s.finish_reason is None and not s.job.dropped]
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
        if all(done is not None for done in job.done):
            settle(job.future, list(job.done))

    def alternatives(self, top: list[tuple[int, float]]) -> list[tuple[str, int, float]]:
        """(text, id, logprob) of one position's best tokens, their texts decoded in one call."""
        texts = self.scorer.token_texts([token for token, _ in top])
        return [(text, token, value) for text, (token, value) in zip(texts, top, strict=True)]


def settle(future: Future, result: Any = None, error: BaseException | None = None) -> None:
    """Set a request's outcome unless it has one: its caller may cancel it meanwhile (another thread)."""
    with contextlib.suppress(InvalidStateError):
        future.set_exception(error) if error is not None else future.set_result(result)


__all__ = ["EngineStalled", "EngineStats", "GenerationEngine", "MAX_BATCH"]
