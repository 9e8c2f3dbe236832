"""The policy server's answers when the served model writes them (``--policy smollm2``, ``model:DIR``).

A scripted policy decides the text and the model only scores it (:mod:`air.serving.vllm_api`); here the
model samples the reply itself through :class:`air.serving.runtime.generation_engine.GenerationEngine`, with
the request's temperature, top-p, top-k, max tokens, stop strings and token ids, seed and ``n``, and the
answer carries the sampled token ids and the logprobs they were drawn with, in the shapes vLLM gives
(chat completions, prime-rl's token-prompt chat route and today's ``/inference/v1/generate``). Knobs it
does not implement (min_p, penalties, logit bias, min_tokens) are refused with vLLM's 400 unless neutral:
a reply sampled otherwise than asked would train on the wrong distribution.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from air.serving.openai_errors import error_body
from air.serving.runtime.sampling import SamplingParams, sequence_seed
from air.serving.runtime.token_scorer import PromptTooLong

if TYPE_CHECKING:
    from air.serving.vllm_api import GenerateRequest, VllmSampling, VllmSide

DEFAULT_MAX_TOKENS = 512  # a reply's cap when the request sets none (vLLM's: the whole context; slow on CPUs)
NEUTRAL = {
    "min_p": (0.0, None),
    "min_tokens": (0, None),
    "repetition_penalty": (1.0, None),
    "presence_penalty": (0.0, None),
    "frequency_penalty": (0.0, None),
    "logit_bias": ({}, None),
}


class UnsupportedSampling(ValueError):
    def __init__(self, param: str, message: str) -> None:
        super().__init__(message)
        self.param = param


def sampling_params(sampling: VllmSampling, default_max_tokens: int | None = DEFAULT_MAX_TOKENS) -> SamplingParams:
    """The request's sampling for the engine; raises UnsupportedSampling for a knob it cannot follow."""
    for name, neutral in NEUTRAL.items():
        value = getattr(sampling, name)
        if value not in neutral:
            raise UnsupportedSampling(name, f"{name}={value!r} is not supported by this server's sampler")
    stop = sampling.stop if isinstance(sampling.stop, list) else [sampling.stop] if sampling.stop else []
    return SamplingParams(
        temperature=1.0 if sampling.temperature is None else sampling.temperature,
        top_p=1.0 if sampling.top_p is None else sampling.top_p,
        top_k=max(0, sampling.top_k or 0),
        max_tokens=sampling.token_limit or default_max_tokens,
        stop=tuple(stop),
        stop_token_ids=tuple(sampling.stop_token_ids or ()),
        ignore_eos=sampling.ignore_eos,
        include_stop_str_in_output=sampling.include_stop_str_in_output,
        seed=sampling.seed,
        top_logprobs=(sampling.top_logprobs or 0) if sampling.logprobs else 0,
    )


async def sample_chat(side: VllmSide, sampling: VllmSampling, model: str, messages: list[dict[str, Any]], n: int):
    """The model's ``n`` completions of a chat (or of ``sampling.tokens``), or the error response."""
    from starlette.concurrency import run_in_threadpool
    from starlette.responses import JSONResponse

    try:
        params = sampling_params(sampling, side.sampler.default_max_tokens)
    except UnsupportedSampling as exc:
        return JSONResponse(error_body(str(exc), kind="BadRequestError", param=exc.param), status_code=400)
    if sampling.tokens is not None:
        prompt_ids = sampling.tokens
    else:
        prompt_ids = await run_in_threadpool(side.scorer.prompt_ids, messages)
        if params.seed is not None:  # each turn of a seeded episode draws afresh, as the scripted server's
            turn = sum(message.get("role") == "assistant" for message in messages)
            params = replace(params, seed=sequence_seed(params.seed, turn))
    try:
        samples = await side.sampler.engine.generate(prompt_ids, params, model, n, stall_s=side.sampler.stall_s)
    except PromptTooLong as exc:
        return JSONResponse(error_body(str(exc), kind="BadRequestError"), status_code=400)
    except RuntimeError as exc:  # the engine failed, stalled or was closed under the request: said once
        return JSONResponse(error_body(str(exc), kind="InternalServerError"), status_code=500)
    if sampling.prompt_logprobs is not None:  # teacher-forced under the model the request names
        scored = await run_in_threadpool(side.scorer.logprobs, prompt_ids[:1], prompt_ids[1:], 1.0, model)
        samples[0] = replace(samples[0], prompt_logprobs=scored)
    return samples


async def sampled_generate(side: VllmSide, request: GenerateRequest, sampling: VllmSampling):
    """vLLM's token-in, token-out answer, sampled by the model (``sampling``: the request's, checked)."""
    from starlette.responses import JSONResponse

    sampling = sampling.model_copy(update={"tokens": request.token_ids, "logprobs": True})
    scored = await sample_chat(side, sampling, request.model, [], 1)
    if isinstance(scored, JSONResponse):
        return scored
    return JSONResponse(side.generate_answer(scored[0]))


class Sampler:
    """What the vLLM side needs to let the model write the replies: the engine, and how it answers.
    ``stall_s``: a request fails when the engine made no progress on it for that long (None: never)."""

    def __init__(
        self, engine, default_max_tokens: int | None = DEFAULT_MAX_TOKENS, stall_s: float | None = None
    ) -> None:
        self.engine = engine
        self.default_max_tokens = default_max_tokens
        self.stall_s = stall_s
        self.chat = sample_chat
        self.generate = sampled_generate


__all__ = ["DEFAULT_MAX_TOKENS", "Sampler", "UnsupportedSampling", "sample_chat", "sampled_generate", "sampling_params"]
