"""The v1 front's player: a harness whose chat loop runs in the env server's own event loop.

verifiers' ``null`` harness starts a Python program (a uv script importing openai and mcp) for every
model turn: on a 2-core host that was 128-168 s of an episode's 144-181 s (experiments.md). verifiers'
contract allows the loop in-process (``Harness.launch``'s docstring): "a harness may run its loop
in-process instead of launching a program, as long as every model call goes through ``endpoint`` +
``secret``". So each model turn here is one POST to the rollout's interception endpoint, with the
rollout's secret, from this process: the interception server does what it does for the ``null``
program (sampling arguments, the renderer's token ids and logprobs, limits, the trace), and this
module only keeps the conversation, as the ``null`` program's ``messages`` list would.

No program, no uv, no subprocess: not per turn, not per episode. The seat's runtime (``subprocess``)
is still provisioned by verifiers, which makes a folder per episode and runs nothing in it.

Model calls: ``model_timeout`` seconds each, ``model_retries`` retries (``air standalone``'s
``--model-timeout`` semantics: a hung endpoint fails the rollout in minutes, never holds it).
A failed call fails the trace with the endpoint's status and message; the interception's own record
of the cause (a provider error, a refused turn) wins where it has one.
"""

from __future__ import annotations

import json
import ssl
from functools import cache
from typing import Any

import httpx
import openai
import verifiers.v1 as vf
from pydantic import Field
from verifiers.v1.dialects.chat import message_to_wire

# A model that keeps calling tools it was never offered ends its segment after this many rounds (the
# null program would loop for ever); each round answers every call with the null program's error.
MAX_TOOL_ROUNDS = 4


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

    async def session(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
        tool_interception_url: str | None = None,
    ) -> PlayerSession:
        return PlayerSession(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data, tool_interception_url)

    async def launch(
        self,
        ctx: Any,
        trace: Any,
        runtime: Any,
        endpoint: str,
        secret: str,
        mcp_urls: dict[str, str],
        data: Any,
        **_: Any,
    ) -> vf.ProgramResult:
        """One segment on a fresh conversation (``agent.run`` and a resumed relaunch take this path)."""
        session = PlayerSession(self, ctx, trace, runtime, endpoint, secret, mcp_urls, data)
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
        self.client = openai.AsyncOpenAI(
            base_url=self.endpoint,
            api_key=self.secret,
            timeout=httpx.Timeout(config.model_timeout, connect=5.0),
            max_retries=config.model_retries,
            # A client per episode, one TLS context per process: loading the CA bundle costs ~20 ms of the
            # event loop's time, once per episode otherwise (the endpoint is loopback HTTP unless tunnelled).
            http_client=openai.DefaultAsyncHttpxClient(verify=_tls_context()),
        )

    async def _run(self, messages: Any) -> vf.ProgramResult:
        if not self.messages:
            self.messages = self._opening()
        for message in messages or []:
            self.messages.append(message if isinstance(message, dict) else message_to_wire(message))
        for _ in range(MAX_TOOL_ROUNDS):
            reply = await self._ask()
            self.messages.append(reply.model_dump(exclude_none=True))
            if not reply.tool_calls:
                break
            for call in reply.tool_calls:  # no tool is offered: the null program's answer
                name = getattr(getattr(call, "function", None), "name", "")
                self.messages.append(
                    {"role": "tool", "tool_call_id": call.id, "content": f"error: unknown tool {name!r}"}
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

    async def _ask(self) -> Any:
        try:
            completion = await self.client.chat.completions.create(model=self.ctx.model, messages=self.messages)
        except openai.APIStatusError as exc:
            raise vf.HarnessError(f"model call failed: HTTP {exc.status_code}: {_message(exc)}") from exc
        except openai.APITimeoutError as exc:
            tries = self.harness.config.model_retries + 1
            raise vf.InterceptionError(
                f"model call timed out: no answer in {self.harness.config.model_timeout:g} s ({tries} tries)"
            ) from exc
        except openai.APIConnectionError as exc:
            raise vf.InterceptionError(f"model call failed: cannot reach {self.endpoint}: {exc}") from exc
        if not completion.choices:
            raise vf.HarnessError("model call failed: the endpoint answered with no choice")
        return completion.choices[0].message

    async def close(self) -> None:
        if not self._closed:
            await self.client.close()
        await super().close()


@cache
def _tls_context() -> ssl.SSLContext:
    return ssl.create_default_context()


PLAYER = {"id": "air_mlgym"}  # the seat's harness table: air_mlgym exports MLGymPlayer


def _message(exc: openai.APIStatusError) -> str:
    """The endpoint's own words: OpenAI's ``{"error": {"message": ...}}``, else the body's text."""
    body = exc.body
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        return json.dumps(body)[:500]
    return str(body or exc.message)[:500]


__all__ = ["MLGymPlayer", "MLGymPlayerConfig"]
