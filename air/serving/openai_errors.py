"""Error bodies in the OpenAI shape, shared by the policy server and its vLLM routes."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError


def error_body(message: str, kind: str = "invalid_request_error", param: str | None = None) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": param, "code": None}}


def describe_validation_error(exc: ValidationError) -> tuple[str, str | None]:
    problems = []
    for error in exc.errors()[:5]:
        where = ".".join(str(part) for part in error["loc"]) or "body"
        problems.append(f"{where}: {error['msg']}")
    first = exc.errors()[0]["loc"] if exc.errors() else ()
    return "Invalid request: " + "; ".join(problems), ".".join(str(p) for p in first) or None
