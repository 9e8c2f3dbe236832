"""A masked rollout's `error` is one line that names the cause, also when the outermost exception has
no message (verifiers' ModelError() around the client's error)."""

from __future__ import annotations

import httpx
import openai
import verifiers as vf

from air.env.trajectories import error_line


def _raised(outer: BaseException, cause: BaseException) -> BaseException:
    try:
        try:
            raise cause
        except BaseException as inner:
            raise outer from inner
    except BaseException as caught:
        return caught


def test_an_http_500_names_status_and_body() -> None:
    request = httpx.Request("POST", "http://127.0.0.1:8000/v1/chat/completions")
    response = httpx.Response(500, request=request, json={"error": {"message": "CUDA out of memory"}})
    cause = openai.InternalServerError("Error code: 500", response=response, body={"message": "CUDA out of memory"})
    line = error_line(_raised(vf.ModelError(), cause))
    assert line.startswith("ModelError: InternalServerError: Error code: 500"), line
    assert "\n" not in line


def test_a_refused_connection_names_the_root_cause() -> None:
    refused = ConnectionRefusedError(111, "Connect call failed ('127.0.0.1', 9)")
    connection = _raised(openai.APIConnectionError(request=httpx.Request("POST", "http://127.0.0.1:9/v1")), refused)
    line = error_line(_raised(vf.ModelError(), connection))
    assert line.startswith("ModelError: APIConnectionError: Connection error.") and "127.0.0.1', 9" in line, line


def test_our_own_message_stays_as_it_is() -> None:
    assert error_line(vf.SandboxError("Docker engine unreachable: lost")) == "Docker engine unreachable: lost"
    assert error_line(None) is None
    assert error_line(RuntimeError()) == "RuntimeError"
