"""Ask a model endpoint once, before any container starts, whether it is there and serves the model:
``GET {base_url}/models`` with the key, else (a server without the listing) a one-token chat completion.
A dead or wrong endpoint is one line naming the URL and what happened, not one masked rollout per
rollout. The standard library only: this runs before the run's heavy imports."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

PROBE_TIMEOUT_S = 10.0
# A server that has no model listing answers these to GET /models; then a completion is asked instead.
_NO_LISTING = (404, 405, 501)


class EndpointError(ValueError):
    """The endpoint cannot serve this run: the message names its URL, what happened and the fix."""


def probe_endpoint(
    base_url: str, api_key: str, model: str, key_var: str = "OPENAI_API_KEY", timeout: float = PROBE_TIMEOUT_S
) -> None:
    """Return when ``base_url`` answers and serves ``model``; else raise :class:`EndpointError`."""
    base = base_url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"}
    status, body = _request(f"{base}/models", headers, None, timeout, key_var)
    if status in _NO_LISTING:
        _complete(base, headers, model, timeout, key_var)
        return
    if status != 200:
        raise EndpointError(
            f"model endpoint {base}/models answered HTTP {status}{_detail(body)}{_fix(status, key_var)}"
        )
    served = _served_models(body)
    if served is None:  # not an OpenAI listing: the completion says whether the model answers
        _complete(base, headers, model, timeout, key_var)
        return
    if model not in served:
        listing = ", ".join(served[:10]) + (", ..." if len(served) > 10 else "") if served else "(none)"
        raise EndpointError(
            f"model endpoint {base} does not serve model {model!r}; it serves: {listing}. "
            f"Pass --model {served[0] if served else 'NAME'}"
        )


def _complete(base: str, headers: dict[str, str], model: str, timeout: float, key_var: str) -> None:
    payload = {"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
    status, body = _request(f"{base}/chat/completions", headers, payload, timeout, key_var)
    if status != 200:
        raise EndpointError(
            f"model endpoint {base} answered a one-token chat completion for model {model!r} with HTTP {status}"
            f"{_detail(body)}{_fix(status, key_var)}"
        )


def _request(
    url: str, headers: dict[str, str], payload: dict[str, Any] | None, timeout: float, key_var: str
) -> tuple[int, bytes]:
    data = json.dumps(payload).encode() if payload is not None else None
    request = urllib.request.Request(url, data=data, headers={**headers, "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (the user's own URL)
            return response.status, response.read(1 << 20)
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read(1 << 16)
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise EndpointError(f"model endpoint {url} cannot be reached: {_why(reason, timeout)}{_reach_fix()}") from None


def _why(reason: object, timeout: float) -> str:
    if isinstance(reason, ConnectionRefusedError):
        return "connection refused (nothing listens there)"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer in {timeout:g} s"
    if isinstance(reason, socket.gaierror):
        return f"unknown host ({reason.strerror})"
    return str(getattr(reason, "strerror", None) or reason)


def _reach_fix() -> str:
    return "; start the server or correct --base-url (the OpenAI-compatible root, e.g. http://HOST:8000/v1)"


def _fix(status: int, key_var: str) -> str:
    if status in (401, 403):
        return f"; check the key in ${key_var} (--api-key-var names the variable)"
    if status in _NO_LISTING:
        return "; is --base-url the OpenAI-compatible root (it usually ends in /v1)?"
    return ""


def _served_models(body: bytes) -> list[str] | None:
    try:
        listing = json.loads(body)
        return [str(entry["id"]) for entry in listing["data"]]
    except (ValueError, TypeError, KeyError):
        return None


def _detail(body: bytes) -> str:
    """The endpoint's own message, short: OpenAI's ``{"error": {"message": ...}}``, else the text."""
    text = body.decode("utf-8", "replace").strip()
    try:
        error = json.loads(text).get("error")
        text = str(error.get("message") if isinstance(error, dict) else error or text)
    except (ValueError, AttributeError):
        pass
    text = " ".join(text.split())
    return f" ({text[:200]})" if text else ""
