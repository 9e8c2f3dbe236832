"""The v1 front's player: a harness whose chat loop runs in the env server's own event loop.

verifiers' ``null`` harness starts a Python program (a uv script importing openai and mcp) for every
model turn: on a 2-core host that was 128-168 s of an episode's 144-181 s (experiments.md). verifiers'
contract allows the loop in-process (``Harness.launch``'s docstring): "a harness may run its loop
in-process instead of launching a program, as long as every model call goes through ``endpoint`` +
``secret``". So each model turn here is one POST to the rollout's interception endpoint, with the
rollout's secret, from this process, with the body the null program's openai client sends (model and
messages): the interception server does what it does for the ``null`` program (sampling arguments, the
renderer's token ids and logprobs, limits, the trace), and this module only keeps the conversation, as
the ``null`` program's ``messages`` list would.

No program, no uv, no subprocess: not per turn, not per episode. The seat's runtime (``subprocess``)
is still provisioned by verifiers, which makes a folder per episode and runs nothing in it.

Model calls: ``model_timeout`` seconds each, ``model_retries`` retries (``air standalone``'s
``--model-timeout`` semantics: a hung endpoint fails the rollout in minutes, never holds it).
A failed call fails the trace with the endpoint's status and message; the interception's own record
of the cause (a provider error, a refused turn) wins where it has one.
"""

from __future__ import annotations

import asyncio
import json
import ssl
from functools import cache
from typing import Any

import httpx
import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire

# A model that keeps calling tools it was never offered ends its segment after this many rounds (the
# null program would loop for ever); each round answers every call with the null program's error.
MAX_TOOL_ROUNDS = 4
RETRY_HEADER = "x-stainless-retry-count"  # the openai SDK's retry mark, which the interception server reads
RETRIED_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})  # what the openai SDK retries
RETRY_PAUSE_S = 0.5


class MLGymPlayerConfig(vf.HarnessConfig):
    """``env.player.harness`` with ``id = "air_mlgym"``."""

    model_timeout: float = Field(180.0, gt=0, description="seconds one model request may take")
    model_retries: int = Field(1, ge=0, le=5, description="retries of a failed or timed-out model request")


class MLGymPlayer(vf.Harness[MLGymPlayerConfig]):
    """A plain chat loop, in-process: the env, not the harness, runs commands."""

    APPENDS_SYSTEM_PROMPT = True  # the system prompt is its own message, as the null harness sends it
    SUPPORTS_RESUME = True
    EXECUTES_CODE = False  # nothing of the model's runs in the seat's runtime
    NEEDS_CONTAINER = False

    async def setup(self, runtime: Any) -> None:
        """Nothing to install: the null harness prepares its uv script here."""

    async def session(self, *args: Any, **kwargs: Any) -> PlayerSession:
        """verifiers' arguments as they come (ctx, trace, runtime, endpoint, secret, mcp_urls, data)."""
        return PlayerSession(self, *args, **kwargs)

    async def launch(self, *args: Any, **kwargs: Any) -> vf.ProgramResult:
        """One segment on a fresh conversation (``agent.run`` and a resumed relaunch take this path)."""
        session = PlayerSession(self, *args, **kwargs)
        try:
            return await session._run(None)
        finally:
            await session.close()


class PlayerSession(vf.HarnessSession):
    """One episode's conversation and its HTTP client; each ``turn`` appends the caller's messages,
    asks the model once (more only to answer tool calls nobody offered) and appends its reply."""

    harness: MLGymPlayer

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        config = self.harness.config
        self.messages: list[dict[str, Any]] = []
        # Plain HTTP, the body the null program's openai client sends (model and messages), without the
        # SDK's per-message request transform and response models: O(history) work per turn, twice over
        # a long conversation. One TLS context per process (loading the CA bundle costs ~20 ms).
        self.http = httpx.AsyncClient(
            base_url=self.endpoint.rstrip("/") + "/",
            headers={"Authorization": f"Bearer {self.secret}"},
            timeout=httpx.Timeout(config.model_timeout, connect=5.0),
            verify=_tls_context(),
        )

    async def _run(self, messages: Any) -> vf.ProgramResult:
        if not self.messages:
            self.messages = self._opening()
        for message in messages or []:
            self.messages.append(message if isinstance(message, dict) else message_to_wire(message))
        for _ in range(MAX_TOOL_ROUNDS):
            reply = await self._ask()
            self.messages.append({key: value for key, value in reply.items() if value is not None})
            if not reply.get("tool_calls"):
                break
            for call in reply["tool_calls"]:  # no tool is offered: the null program's answer
                name = (call.get("function") or {}).get("name", "")
                self.messages.append(
                    {"role": "tool", "tool_call_id": call.get("id"), "content": f"error: unknown tool {name!r}"}
                )
        return vf.ProgramResult(exit_code=0, stdout="", stderr="")

    def _opening(self) -> list[dict[str, Any]]:
        system, prompt = self.harness.resolve_prompt(self.data)
        opening: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
        if isinstance(prompt, str):
            opening.append({"role": "user", "content": prompt})
        elif prompt is not None:
            opening += [m if isinstance(m, dict) else message_to_wire(m) for m in prompt]
        return opening

    async def _ask(self) -> dict[str, Any]:
        """One chat completion. Retried like the openai SDK retries (a dropped connection, a timeout, 408,
        409, 429, 5xx), marking each retry with its ``x-stainless-retry-count`` header: the interception
        server answers a marked retry with the turn it already recorded instead of sampling it twice."""
        config = self.harness.config
        body = {"model": self.ctx.model, "messages": self.messages}
        for attempt in range(config.model_retries + 1):
            last = attempt == config.model_retries
            headers = {RETRY_HEADER: str(attempt)} if attempt else None
            try:
                response = await self.http.post("chat/completions", json=body, headers=headers)
            except httpx.TimeoutException as exc:
                if last:
                    raise vf.InterceptionError(
                        f"model call timed out: no answer in {config.model_timeout:g} s ({attempt + 1} tries)"
                    ) from exc
                continue
            except httpx.TransportError as exc:
                if last:
                    raise vf.InterceptionError(f"model call failed: cannot reach {self.endpoint}: {exc}") from exc
                await asyncio.sleep(RETRY_PAUSE_S * 2**attempt)
                continue
            if response.status_code in RETRIED_STATUSES and not last:
                await asyncio.sleep(RETRY_PAUSE_S * 2**attempt)
                continue
            if response.status_code >= 400:
                raise vf.HarnessError(f"model call failed: HTTP {response.status_code}: {_message(response)}")
            try:
                return response.json()["choices"][0]["message"]
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                raise vf.HarnessError(f"model call failed: not a chat completion: {response.text[:300]!r}") from exc
        raise AssertionError("unreachable: the last attempt returns or raises")

    async def close(self) -> None:
        if not self._closed:
            await self.http.aclose()
        await super().close()


@cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


PLAYER = {"id": "air_mlgym"}  # the seat's harness table: air_mlgym exports MLGymPlayer


def _message(response: httpx.Response) -> str:
    """The endpoint's own words: OpenAI's ``{"error": {"message": ...}}``, else the body's text."""
    try:
        body = response.json()
    except ValueError:
        return response.text[:500] or response.reason_phrase
    error = body.get("error", body) if isinstance(body, dict) else body
    if isinstance(error, dict) and error.get("message"):
        return str(error["message"])
    return json.dumps(body)[:500]


__all__ = ["MLGymPlayer", "MLGymPlayerConfig"]
