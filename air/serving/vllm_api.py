"""What the policy server adds to answer like vLLM (``air policy-server --vllm MODEL_DIR``).

prime-rl's orchestrator and verifiers read token-level fields only vLLM returns and call its admin routes:
- ``prompt_token_ids``, ``choices[i].token_ids`` (``return_token_ids``) and ``choices[i].logprobs.content``
  (``logprobs``): for scripted text, ids and teacher-forced logprobs from
  :class:`air.serving.runtime.token_scorer.TokenScorer`; a sampling model's own (:mod:`air.serving.sampled_api`);
- vLLM's 404 for a model name neither served nor a loaded LoRA adapter, its 400 wording for a prompt past
  the context (verifiers maps it to ``prompt_too_long``);
- ``POST /tokenize``, ``POST /v1/chat/completions/tokens`` (a prompt given as token ids) and
  ``POST /inference/v1/generate`` (today's prime-rl: token ids in and out; the scripted policy reads the
  chat back from the ChatML tokens);
- the weight routes (``/update_weights``, ``/reload_weights``, ``/load_lora_adapter``, vLLM's own
  ``/v1/load_lora_adapter`` and ``/v1/unload_lora_adapter``, ``/pause``, ``/resume``), recorded in
  :attr:`VllmSide.weight_updates`; with ``load_broadcasts`` (a rehearsal with ``--trainer``) the adapter or full
  weights a trainer published are loaded (:mod:`air.serving.runtime.broadcast_loading`) and requests naming them
  are served by the updated model; one that does not load answers 500 with its reason. ``GET /metrics``.
"""

from __future__ import annotations

import json
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from air.serving.openai_errors import describe_validation_error, error_body
from air.serving.runtime.token_scorer import PromptTooLong, ScoredCompletion, TokenScorer

# prime-rl's wrappers (JSON answers) and vLLM's own LoRA routes (text answers).
LOAD_ROUTES = ("/load_lora_adapter", "/v1/load_lora_adapter")
UNLOAD_ROUTE = "/v1/unload_lora_adapter"
ADMIN_ROUTES = ("/update_weights", "/reload_weights", *LOAD_ROUTES, UNLOAD_ROUTE, "/pause", "/resume")
GENERATE_ROUTE = "/inference/v1/generate"
CHATML_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>", re.DOTALL)


class VllmSampling(BaseModel):
    """The fields of a request that change a vLLM answer here. A scripted policy's text ignores the
    sampling knobs (only logprobs are scaled by the temperature); a served model that samples
    (:mod:`air.serving.sampled_api`) follows them and refuses the ones it does not implement."""

    model_config = ConfigDict(extra="ignore")

    temperature: float | None = Field(default=None, ge=0)
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=20)
    return_token_ids: bool | None = None
    return_tokens_as_token_ids: bool | None = None
    tokens: list[int] | None = None  # /v1/chat/completions/tokens: the prompt, already tokenized
    prompt_logprobs: int | None = Field(default=None, ge=0)  # a sampling model: each prompt token's logprob
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: int | None = Field(default=None, ge=-1)
    stop: str | list[str] | None = None
    stop_token_ids: list[int] | None = None
    ignore_eos: bool = False
    include_stop_str_in_output: bool = False
    seed: int | None = None
    # Knobs a sampling model here does not implement: refused there unless neutral.
    min_p: float | None = None
    min_tokens: int | None = None
    repetition_penalty: float | None = None
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens or self.max_tokens


class TokenizeRequest(BaseModel):
    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: str | None = None
    messages: list[dict[str, Any]] | None = None
    add_generation_prompt: bool = True
    add_special_tokens: bool = False
    return_token_strs: bool = False


class GenerateRequest(BaseModel):
    """vLLM's token-in, token-out request (prime-rl's ``/inference/v1/generate``)."""

    model_config = ConfigDict(extra="ignore")

    model: str
    token_ids: list[int] = Field(min_length=1)
    sampling_params: dict[str, Any] = Field(default_factory=dict)


@dataclass
class WeightUpdate:
    route: str
    body: dict[str, Any]
    at: float = field(default_factory=time.time)
    loaded: bool | None = None  # with load_broadcasts: whether the files it names were loaded
    error: str | None = None  # why they were not


class VllmSide:
    """The served model's name, the LoRA adapters loaded so far, and what the admin routes were asked."""

    def __init__(
        self, scorer: TokenScorer, model_name: str, load_broadcasts: bool = False, sampler: Any = None
    ) -> None:
        self.scorer = scorer
        self.model_name = model_name
        self.load_broadcasts = load_broadcasts
        self.sampler = sampler  # when the model writes the replies (air.serving.sampled_api.Sampler)
        self.adapters: dict[str, str] = {}  # LoRA name -> path it was loaded from
        self.weight_updates: list[WeightUpdate] = []
        self._lock = threading.Lock()

    def model_ids(self) -> list[str]:
        return [self.model_name, *self.adapters]

    def unknown_model(self, name: str) -> str | None:
        """vLLM's message for a model it does not serve, or None when it serves it."""
        if name in self.model_ids():
            return None
        return f"The model `{name}` does not exist."

    # ------------------------------------------------------------------ chat completions

    def score(
        self, messages: list[dict[str, Any]], replies: list[str], sampling: VllmSampling, model: str | None = None
    ) -> list[ScoredCompletion]:
        """Each reply as vLLM would return it; raises PromptTooLong like vLLM's 400."""
        prompt_ids = sampling.tokens if sampling.tokens is not None else self.scorer.prompt_ids(messages)
        temperature = 1.0 if sampling.temperature is None else sampling.temperature
        return [self.scorer.complete(prompt_ids, reply, sampling.token_limit, temperature, model) for reply in replies]

    @staticmethod
    def choice(index: int, scored: ScoredCompletion, sampling: VllmSampling) -> dict[str, Any]:
        logprobs = None
        if sampling.logprobs:
            as_ids = bool(sampling.return_tokens_as_token_ids)
            logprobs = {
                "content": [
                    {
                        "token": f"token_id:{token_id}" if as_ids else text,
                        "logprob": logprob,
                        "bytes": list(text.encode()),
                        "top_logprobs": [
                            {"token": f"token_id:{i}" if as_ids else t, "logprob": v, "bytes": list(t.encode())}
                            for t, i, v in (scored.top_logprobs[place] if scored.top_logprobs else [])
                        ],
                    }
                    for place, (token_id, text, logprob) in enumerate(
                        zip(scored.token_ids, scored.tokens, scored.logprobs, strict=True)
                    )
                ]
            }
        return {
            "index": index,
            "message": {"role": "assistant", "content": scored.text},
            "logprobs": logprobs,
            "finish_reason": scored.finish_reason,
            "stop_reason": scored.stop_reason,
            "token_ids": scored.token_ids if sampling.return_token_ids else None,
        }

    @staticmethod
    def usage(scored: list[ScoredCompletion]) -> dict[str, int]:
        prompt = len(scored[0].prompt_ids) if scored else 0
        completion = sum(len(s.token_ids) for s in scored)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}

    def prompt_logprobs(self, scored: ScoredCompletion) -> list[dict[str, Any] | None] | None:
        """vLLM's ``prompt_logprobs``: nothing for the first token, then each token's own logprob."""
        if scored.prompt_logprobs is None:
            return None
        ids = scored.prompt_ids[1:]
        found = zip(ids, scored.prompt_logprobs, self.scorer.token_texts(ids), strict=True)
        return [None, *({str(i): {"logprob": v, "rank": None, "decoded_token": t}} for i, v, t in found)]

    # ------------------------------------------------------------------ token in, token out

    def messages_of(self, token_ids: list[int]) -> list[dict[str, Any]]:
        """The conversation a rendered prompt holds (our tokenizer's ChatML turns), for the policy."""
        text = self.scorer.tokenizer.decode(token_ids, skip_special_tokens=False)
        return [{"role": role, "content": content} for role, content in CHATML_TURN.findall(text)]

    def generate(self, request: GenerateRequest, reply: str) -> dict[str, Any]:
        """vLLM's answer to a token prompt; raises PromptTooLong like vLLM's 400."""
        sampling = VllmSampling.model_validate(request.sampling_params)
        temperature = 1.0 if sampling.temperature is None else sampling.temperature
        scored = self.scorer.complete(request.token_ids, reply, sampling.token_limit, temperature, request.model)
        return self.generate_answer(scored)

    def generate_answer(self, scored: ScoredCompletion) -> dict[str, Any]:
        content = [
            {"token": f"token_id:{token_id}", "logprob": logprob}
            for token_id, logprob in zip(scored.token_ids, scored.logprobs, strict=True)
        ]
        return {
            "request_id": f"generate-{uuid.uuid4().hex}",
            "choices": [
                {
                    "index": 0,
                    "token_ids": scored.token_ids,
                    "finish_reason": scored.finish_reason,
                    "logprobs": {"content": content},
                }
            ],
            "prompt_token_ids": scored.prompt_ids,
            "usage": self.usage([scored]),
        }

    # ------------------------------------------------------------------ the other routes

    def tokenize(self, raw: bytes) -> tuple[int, dict[str, Any]]:
        try:
            request = TokenizeRequest.model_validate_json(raw)
        except ValidationError as exc:
            return 400, error_body(describe_validation_error(exc)[0])
        if (request.prompt is None) == (request.messages is None):
            return 400, error_body("give exactly one of prompt and messages")
        if request.messages is not None:
            text = self.scorer.render(request.messages, request.add_generation_prompt)
        else:
            text = request.prompt or ""
        tokens = self.scorer.encode(text)
        return 200, {
            "count": len(tokens),
            "max_model_len": self.scorer.max_model_len,
            "tokens": tokens,
            "token_strs": self.scorer.token_texts(tokens) if request.return_token_strs else None,
        }

    def record(self, route: str, body: dict[str, Any]) -> tuple[int, dict[str, Any] | str]:
        """Acknowledge a weight or adapter route the way vLLM (and prime-rl's wrapper of it) answers;
        with ``load_broadcasts``, load what it names first."""
        update = WeightUpdate(route, dict(body))
        with self._lock:
            self.weight_updates.append(update)
        named = isinstance(body.get("lora_name"), str) and isinstance(body.get("lora_path"), str)
        if route in LOAD_ROUTES and not named:
            return 400, error_body("lora_name and lora_path are required (strings)")
        if self.load_broadcasts and (route in LOAD_ROUTES or route == "/update_weights"):
            failure = self.load(route, body, update)
            if failure is not None:
                return 500, error_body(failure, kind="InternalServerError")
        with self._lock:
            if route in LOAD_ROUTES:
                name, path = body["lora_name"], body["lora_path"]
                self.adapters[name] = path  # in place when loaded before, as prime-rl's patched vLLM does
                if route.startswith("/v1/"):  # vLLM's own route answers in text, prime-rl's wrapper in JSON
                    return 200, f"Success: LoRA adapter '{name}' added successfully."
                return 200, {"status": "ok"}
            if route == UNLOAD_ROUTE:
                name = body.get("lora_name")
                if self.adapters.pop(name, None) is None:
                    message = f"The lora adapter '{name}' cannot be found."
                    return 404, error_body(message, kind="NotFoundError")
                return 200, f"Success: LoRA adapter '{name}' removed successfully."
        return 200, {"status": "ok"}

    def load(self, route: str, body: dict[str, Any], update: WeightUpdate) -> str | None:
        """Load the adapter or weights a route names into the scorer; the reason when they do not load."""
        from air.serving.runtime.broadcast_loading import BroadcastLoadError

        try:
            if route in LOAD_ROUTES:
                self.scorer.load_adapter(body["lora_name"], body["lora_path"])
            elif isinstance(body.get("weight_dir"), str):
                self.scorer.load_weights(body["weight_dir"])
            else:
                raise BroadcastLoadError("/update_weights names no weight_dir to load")
        except BroadcastLoadError as exc:
            update.loaded, update.error = False, str(exc)
            return f"cannot load the broadcast: {exc}"
        update.loaded = True
        return None

    # ------------------------------------------------------------------ HTTP

    async def completion_response(
        self, sampling: VllmSampling, model: str, messages: list[dict[str, Any]], replies: list[str]
    ):
        """The non-streamed chat completion vLLM would send for these scripted replies."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse

        try:
            # a forward pass: off the loop
            scored = await run_in_threadpool(self.score, messages, replies, sampling, model)
        except PromptTooLong as exc:
            return JSONResponse(error_body(str(exc), kind="BadRequestError"), status_code=400)
        return self.completion_json(sampling, model, scored)

    def completion_json(self, sampling: VllmSampling, model: str, scored: list[ScoredCompletion]):
        from starlette.responses import JSONResponse

        return JSONResponse(
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": [self.choice(i, one, sampling) for i, one in enumerate(scored)],
                "usage": self.usage(scored),
                "prompt_token_ids": scored[0].prompt_ids if sampling.return_token_ids else None,
                "prompt_logprobs": self.prompt_logprobs(scored[0]) if sampling.prompt_logprobs is not None else None,
            }
        )

    def routes(self, chat_completions, respond) -> list:
        """/tokenize, prime-rl's token-prompt chat route (served by ``chat_completions``), the token-in,
        token-out route (the policy's reply from ``respond(messages)``), the admin routes, /metrics."""
        from starlette.concurrency import run_in_threadpool
        from starlette.requests import Request
        from starlette.responses import JSONResponse, PlainTextResponse
        from starlette.routing import Route

        async def generate(request: Request) -> JSONResponse:
            try:
                body = GenerateRequest.model_validate_json(await request.body())
                sampling = VllmSampling.model_validate(body.sampling_params)
            except ValidationError as exc:
                message, param = describe_validation_error(exc)
                return JSONResponse(error_body(message, param=param), status_code=400)
            unknown = self.unknown_model(body.model)
            if unknown:
                return JSONResponse(error_body(unknown, kind="NotFoundError", param="model"), status_code=404)
            if self.sampler is not None:
                return await self.sampler.generate(self, body, sampling)
            messages = await run_in_threadpool(self.messages_of, body.token_ids)
            try:
                reply = respond(messages)
            except Exception as exc:  # a policy bug answers as a server error, as in chat completions
                return JSONResponse(error_body(f"the policy failed: {exc!r}", kind="server_error"), status_code=500)
            try:
                payload = await run_in_threadpool(self.generate, body, reply)  # a forward pass: off the loop
            except PromptTooLong as exc:
                return JSONResponse(error_body(str(exc), kind="BadRequestError"), status_code=400)
            return JSONResponse(payload)

        async def metrics(_: Request) -> PlainTextResponse:
            gauge = f'vllm:num_requests_running{{model_name="{self.model_name}"}} 0'
            lines = ["# TYPE vllm:num_requests_running gauge", gauge]
            return PlainTextResponse("\n".join(lines) + "\n", media_type="text/plain; version=0.0.4")

        async def tokenize(request: Request) -> JSONResponse:
            status, payload = await run_in_threadpool(self.tokenize, await request.body())
            return JSONResponse(payload, status_code=status)

        def admin(route: str) -> Route:
            async def handle(request: Request):
                raw = await request.body()
                try:
                    body = json.loads(raw) if raw.strip() else {}
                except ValueError:
                    body = None
                if not isinstance(body, dict):
                    return JSONResponse(error_body(f"{route} takes a JSON object"), status_code=400)
                status, payload = await run_in_threadpool(self.record, route, body)  # may load weights
                if isinstance(payload, str):
                    return PlainTextResponse(payload, status_code=status)
                return JSONResponse(payload, status_code=status)

            return Route(route, handle, methods=["POST"])

        return [
            Route("/tokenize", tokenize, methods=["POST"]),
            Route("/v1/chat/completions/tokens", chat_completions, methods=["POST"]),
            Route(GENERATE_ROUTE, generate, methods=["POST"]),
            Route("/metrics", metrics, methods=["GET"]),
            *(admin(route) for route in ADMIN_ROUTES),
        ]


__all__ = [
    "ADMIN_ROUTES",
    "GENERATE_ROUTE",
    "GenerateRequest",
    "PromptTooLong",
    "TokenizeRequest",
    "VllmSampling",
    "VllmSide",
    "WeightUpdate",
]
