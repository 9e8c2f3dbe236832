"""A scripted policy behind a real OpenAI-compatible HTTP server.

Tests and the no-GPU standalone mode need "a model" that the environment reaches exactly as it
reaches vLLM: through ``openai.AsyncOpenAI`` over HTTP. This module serves a policy from
:mod:`air.policies.scripted` on ``/v1/chat/completions`` (plain and streamed), ``/v1/models`` and
``/health``, with starlette on uvicorn in a background thread (:class:`PolicyServer`), or in the
foreground from the ``air policy-server`` command (:func:`serve_forever`, wired in ``air.cli.runs``).

Unknown request fields (temperature, max_tokens, logprobs, extra_body, ...) are ignored; any
model name is accepted and echoed back. A malformed request gets HTTP 400 with an OpenAI-style
error body. Randomness: one ``random.Random(seed)`` for the server, from which each request
draws its own generator in the order requests arrive; a request's ``seed`` field instead makes that
reply a pure function of the seed, the turn (replies so far) and the conversation, whatever else the
server is asked meanwhile (``air standalone`` seeds each rollout's requests so).
"""

from __future__ import annotations

import hashlib
import json
import random
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from air.policies.scripted import Policy, make_policy
from air.serving.chat_schema import ChatRequest
from air.serving.models.served_model import ModelPolicy, is_model_spec, model_dir_for
from air.serving.openai_errors import describe_validation_error, error_body
from air.serving.sampled_api import Sampler
from air.serving.vllm_api import VllmSampling, VllmSide

STARTUP_TIMEOUT_S = 30.0
KEEP_ALIVE_S = 75  # seconds an idle keep-alive connection stays open (see start())


class PolicyServerError(RuntimeError):
    """The server could not start (address in use, startup failure)."""


# --------------------------------------------------------------------------- responses


def policy_name(policy: Policy) -> str:
    return getattr(policy, "name", None) or type(policy).__name__


def rough_tokens(text: str) -> int:
    return max(1, len(text) // 4) if text else 0  # ~4 characters per token: enough for usage accounting


class PolicyApp:
    """The ASGI application: routes, request validation and the OpenAI response shapes."""

    def __init__(self, policy: Policy, model_name: str, seed: int, vllm: VllmSide | None = None) -> None:
        self.policy = policy
        self.vllm = vllm  # answer like vLLM: token ids, logprobs, its admin routes (air.serving.vllm_api)
        self.policy_name = policy_name(policy)
        self.model_name = model_name
        self.seed = seed
        self._rng = random.Random(seed)
        self._rng_lock = threading.Lock()  # requests of one server may come from several threads' clients
        self.requests_served = 0
        self.app = self._build()

    def request_rng(self, request: ChatRequest, messages: list[dict[str, Any]], choice: int = 0) -> random.Random:
        if request.seed is not None:
            # The seed and the turn, as vLLM's seeded sampling: each turn of an episode draws afresh, and what
            # an observation holds that no reply depends on (ls -la's times) does not change the draws.
            turn = sum(m.get("role") == "assistant" for m in messages)
            key = json.dumps([request.seed, choice, turn])
            digest = hashlib.sha256(key.encode()).digest()
            return random.Random(digest)
        with self._rng_lock:
            return random.Random(self._rng.getrandbits(64))

    def _respond(self, messages: list[dict[str, Any]]) -> str:
        """One reply of the policy to a conversation given as tokens (no request seed to derive it from)."""
        self.requests_served += 1
        with self._rng_lock:
            rng = random.Random(self._rng.getrandbits(64))
        return self.policy.respond(messages, rng)

    def _build(self):
        from starlette.applications import Starlette
        from starlette.exceptions import HTTPException
        from starlette.requests import Request
        from starlette.responses import JSONResponse, StreamingResponse
        from starlette.routing import Route

        async def health(_: Request) -> JSONResponse:
            return JSONResponse({"status": "ok", "model": self.model_name, "policy": self.policy_name})

        async def models(_: Request) -> JSONResponse:
            names = self.vllm.model_ids() if self.vllm else [self.model_name]
            entries = [{"id": name, "object": "model", "created": 0, "owned_by": "air-agent"} for name in names]
            return JSONResponse({"object": "list", "data": entries})

        async def chat_completions(request: Request):
            try:
                body = ChatRequest.model_validate_json(await request.body())
            except ValidationError as exc:
                message, param = describe_validation_error(exc)
                return JSONResponse(error_body(message, param=param), status_code=400)
            messages = [m.as_dict() for m in body.messages]
            sampling = None
            if self.vllm is not None:
                unknown = self.vllm.unknown_model(body.model)
                if unknown:
                    return JSONResponse(error_body(unknown, kind="NotFoundError", param="model"), status_code=404)
                try:  # before the policy answers: a rejected request draws nothing from its generator
                    sampling = VllmSampling.model_validate_json(await request.body())
                except ValidationError as exc:
                    message, param = describe_validation_error(exc)
                    return JSONResponse(error_body(message, param=param), status_code=400)
            if sampling is not None and self.vllm.sampler is not None:  # the model writes the replies
                sampled = await self.vllm.sampler.chat(self.vllm, sampling, body.model, messages, body.n)
                if not isinstance(sampled, list):
                    return sampled  # the request's error
                self.requests_served += 1
                if not body.stream:
                    return self.vllm.completion_json(sampling, body.model, sampled)
                replies, usage = [one.text for one in sampled], self.vllm.usage(sampled)
            else:
                try:
                    rngs = [self.request_rng(body, messages, i) for i in range(body.n)]
                    replies = [self.policy.respond(messages, rng) for rng in rngs]
                except Exception as exc:  # a policy bug must answer as a server error, not kill the connection
                    message = f"policy {self.policy_name!r} failed: {type(exc).__name__}: {exc}"
                    return JSONResponse(error_body(message, kind="server_error"), status_code=500)
                self.requests_served += 1
                if sampling is not None and not body.stream:
                    return await self.vllm.completion_response(sampling, body.model, messages, replies)
                usage = {
                    "prompt_tokens": sum(rough_tokens(m["content"]) + 4 for m in messages),
                    "completion_tokens": sum(rough_tokens(r) for r in replies),
                }
            completion_id = f"chatcmpl-{uuid.uuid4().hex}"
            created = int(time.time())
            usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
            if body.stream:
                include_usage = bool(body.stream_options and body.stream_options.include_usage)
                chunks = self._stream(completion_id, created, body.model, replies, usage if include_usage else None)
                return StreamingResponse(chunks, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})
            choices = [
                {
                    "index": i,
                    "message": {"role": "assistant", "content": reply},
                    "logprobs": None,
                    "finish_reason": "stop",
                }
                for i, reply in enumerate(replies)
            ]
            return JSONResponse(
                {
                    "id": completion_id,
                    "object": "chat.completion",
                    "created": created,
                    "model": body.model,
                    "choices": choices,
                    "usage": usage,
                }
            )

        async def http_error(_: Request, exc: Exception) -> JSONResponse:
            assert isinstance(exc, HTTPException)
            kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
            return JSONResponse(error_body(str(exc.detail), kind=kind), status_code=exc.status_code)

        routes = [
            Route("/health", health, methods=["GET"]),
            Route("/v1/models", models, methods=["GET"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
        ]
        if self.vllm is not None:
            routes += self.vllm.routes(chat_completions, self._respond)
        return Starlette(routes=routes, exception_handlers={HTTPException: http_error})

    async def _stream(
        self, completion_id: str, created: int, model: str, replies: list[str], usage: dict[str, int] | None
    ) -> AsyncIterator[str]:
        def chunk(index: int, delta: dict[str, Any], finish_reason: str | None) -> str:
            data = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish_reason}],
            }
            return f"data: {json.dumps(data)}\n\n"

        for index, reply in enumerate(replies):
            yield chunk(index, {"role": "assistant", "content": ""}, None)
            for piece in reply.splitlines(keepends=True):  # line by line, like tokens arriving
                yield chunk(index, {"content": piece}, None)
            yield chunk(index, {}, "stop")
        if usage is not None:
            data = {
                "id": completion_id,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [],
                "usage": usage,
            }
            yield f"data: {json.dumps(data)}\n\n"
        yield "data: [DONE]\n\n"


# --------------------------------------------------------------------------- server in a thread


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port, created with proto=IPPROTO_TCP.

    asyncio turns on TCP_NODELAY only for connections of sockets whose proto says TCP
    (``socket.create_server`` leaves it 0). Without it, a response's header and body writes meet
    Nagle's algorithm and the client's delayed ACK: every keep-alive request took ~40 ms.
    """
    family, kind, proto, _, address = socket.getaddrinfo(
        host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP, flags=socket.AI_PASSIVE
    )[0]
    sock = socket.socket(family, kind, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(address)
        sock.listen(128)
    except OSError:
        sock.close()
        raise
    return sock


class PolicyServer:
    """Serves a policy on ``http://host:port/v1`` from a background thread with its own event loop.

    ``port=0`` picks a free port (read it back from :attr:`port` or :attr:`base_url` after
    :meth:`start`). Use as a context manager, or call :meth:`start` / :meth:`stop`.
    """

    def __init__(
        self,
        policy: Policy | str,
        model_name: str | None = None,
        host: str = "127.0.0.1",
        port: int = 0,
        seed: int = 0,
        log_level: str = "warning",
        vllm_model: str | Path | None = None,
        max_model_len: int | None = None,
        load_broadcasts: bool = False,
        stall_s: float | None = None,
    ) -> None:
        """``vllm_model``: a model directory (``air tiny-model`` writes one); the server then answers like
        vLLM serving it (token ids, logprobs, admin routes; with ``load_broadcasts`` the weight routes load
        what they name) and its name defaults to the directory's path, as vLLM names it. ``stall_s``: a sampled
        request fails (500) after that long without progress (air.serving.runtime.engine_progress); None: never."""
        samples = is_model_spec(policy)  # the model writes the replies (smollm2, model:DIR)
        if samples:
            vllm_model = vllm_model or model_dir_for(str(policy))
            self.policy: Policy = ModelPolicy(str(policy))
        else:
            self.policy = make_policy(policy) if isinstance(policy, str) else policy
        spec = policy if isinstance(policy, str) else policy_name(self.policy)
        vllm = None
        if vllm_model is not None:
            from air.serving.runtime.token_scorer import TokenScorer  # torch: only when asked for

            model_name = model_name or str(vllm_model)
            scorer = TokenScorer(vllm_model, max_model_len)
            sampler = None
            if samples:
                from air.serving.runtime.generation_engine import GenerationEngine

                sampler = Sampler(GenerationEngine(scorer, seed), stall_s=stall_s)
            vllm = VllmSide(scorer, model_name, load_broadcasts, sampler)
        self.model_name = model_name or f"scripted-{spec}"
        self.host = host
        self.port = port
        self.seed = seed
        self.log_level = log_level
        self.app = PolicyApp(self.policy, self.model_name, seed, vllm)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/v1"

    @property
    def weight_updates(self) -> list[Any]:
        """What the trainer's broadcasts asked of the server, in order (empty unless it answers like vLLM)."""
        return self.app.vllm.weight_updates if self.app.vllm is not None else []

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> PolicyServer:
        """Listen, serve in a daemon thread, and return once requests are being answered."""
        import uvicorn

        if self.running:
            return self
        try:
            # Bound here, not by uvicorn, so port 0 resolves before start() returns and errors surface here.
            self._socket = listening_socket(self.host, self.port)
        except OSError as exc:
            raise PolicyServerError(f"cannot listen on {self.host}:{self.port}: {exc.strerror or exc}") from exc
        self.port = self._socket.getsockname()[1]
        config = uvicorn.Config(
            self.app.app,
            log_level=self.log_level,
            log_config=None,  # leave the host program's logging configuration alone
            access_log=False,
            lifespan="off",
            # Outlive every client's idle pool (httpx and openai keep idle connections 5 s, uvicorn's
            # default is also 5 s): otherwise a client reuses a connection the server closes at that
            # same instant and the rollout dies on a ReadError, seen with eight rollouts under load.
            timeout_keep_alive=KEEP_ALIVE_S,
            timeout_graceful_shutdown=5,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self._socket]}, name=f"policy-server:{self.port}", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise PolicyServerError(f"the policy server on {self.host}:{self.port} did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self.app.vllm is not None and self.app.vllm.sampler is not None:
            self.app.vllm.sampler.engine.close()  # first: requests in flight answer 500 now, not at shutdown's end
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = self._socket = None

    def wait(self, poll_s: float = 0.5) -> None:
        """Block while the server runs; Ctrl-C (KeyboardInterrupt) reaches the caller."""
        while self._thread is not None and self._thread.is_alive():
            self._thread.join(poll_s)

    def __enter__(self) -> PolicyServer:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


# --------------------------------------------------------------------------- command line


def serve_forever(
    spec: str,
    host: str = "127.0.0.1",
    port: int = 8008,
    seed: int = 0,
    vllm_model: str | None = None,
    hints: Callable[[str, str], list[str]] | None = None,
) -> int:
    """Serve ``spec`` until Ctrl-C, printing its URL and ``hints(url, model)``: clients' command lines."""
    server = PolicyServer(spec, host=host, port=port, seed=seed, log_level="info", vllm_model=vllm_model).start()
    url, model = server.base_url, server.model_name
    if is_model_spec(spec):
        print(f"Serving {spec} (its own samples, like vLLM) as model {model!r} at {url}")
    else:
        like = f", answering like vLLM serving {vllm_model}" if vllm_model else ""
        print(f"Serving scripted policy {spec!r} as model {model!r} at {url}{like}")
    if lines := hints(url, model) if hints else []:
        print("Point a client at it, e.g.:", *lines, sep="\n  ")
    print("Press Ctrl-C to stop.", flush=True)
    try:
        server.wait()
    except KeyboardInterrupt:
        print("Stopping.")
        return 0
    finally:
        server.stop()
    return 1  # the server thread ended on its own: something went wrong (logged by uvicorn)
