"""A model endpoint asked once before a standalone run starts (real servers on loopback: the project's
PolicyServer, and tiny http.servers for what it never does), and one that dies during the run said once
per cause on the console, with its count, instead of once per rollout."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from air.serving.server import PolicyServer
from rigs.patience import backstop
from tests.json_endpoint import JsonEndpoint, serve
from tests.runs.counted_imports import standalone_counting_imports

CRASH = {"error": {"message": "model crashed: CUDA out of memory", "type": "InternalServerError", "code": 500}}
COMPLETION = {
    "id": "x",
    "object": "chat.completion",
    "created": 0,
    "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "length"}],
}


class _Handler(JsonEndpoint):  # lists the model, then every completion crashes
    chat = (500, CRASH)


class _NoListing(_Handler):  # a server without /models that completes
    models = (404, {"error": {"message": "Not Found"}})
    chat = (200, COMPLETION)


class _NoListingFailing(_Handler):
    models = (404, {"error": {"message": "Not Found"}})


class _Unauthorized(_Handler):
    models = (401, {"error": {"message": "Invalid API key"}})


@pytest.fixture
def lists_then_fails() -> Iterator[str]:
    yield from serve(_Handler)


def _probe():  # imported per test: the command-line tests below need none of it
    from air.runs.endpoint_probe import EndpointError, probe_endpoint

    return EndpointError, probe_endpoint


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_a_served_model_passes_and_another_is_refused_naming_what_is_served() -> None:
    EndpointError, probe_endpoint = _probe()
    with PolicyServer("baseline", model_name="served-by-hand") as server:
        probe_endpoint(server.base_url, "key", "served-by-hand")
        with pytest.raises(EndpointError, match=r"does not serve model 'default'; it serves: served-by-hand"):
            probe_endpoint(server.base_url, "key", "default")


def test_without_a_model_listing_one_token_is_asked_for() -> None:
    EndpointError, probe_endpoint = _probe()
    for url in serve(_NoListing):
        probe_endpoint(url, "key", "m")
    for url in serve(_NoListingFailing):
        with pytest.raises(EndpointError, match=r"chat completion for model 'm' with HTTP 500 \(model crashed"):
            probe_endpoint(url, "key", "m")


def test_a_refused_key_names_the_variable_that_holds_it() -> None:
    EndpointError, probe_endpoint = _probe()
    for url in serve(_Unauthorized):
        with pytest.raises(EndpointError, match=r"HTTP 401 \(Invalid API key\); check the key in \$MY_KEY"):
            probe_endpoint(url, "key", "m", key_var="MY_KEY")


def test_a_silent_endpoint_is_a_timeout() -> None:
    EndpointError, probe_endpoint = _probe()
    with socket.socket() as silent:  # accepts connections (the backlog) and never answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/v1"
        with pytest.raises(EndpointError, match=r"cannot be reached: no answer in 0.5 s"):
            probe_endpoint(url, "key", "m", timeout=0.5)


def test_a_dead_endpoint_is_one_line_before_the_run_starts(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_free_port()}/v1"
    out = standalone_counting_imports(
        "--env", "simple_env", "--base-url", url, "--output-dir", str(tmp_path / "run"), cwd=tmp_path
    )
    lines = out["err"].strip().splitlines()
    assert out["code"] == 1 and len(lines) == 1, out["err"]
    assert lines[0].startswith(f"air: error: model endpoint {url}/models cannot be reached: connection refused")
    assert out["heavy"] == [], "the endpoint is asked before the env's stack is imported"
    assert not (tmp_path / "run").exists(), "a refused start leaves no folder"


def test_a_model_the_endpoint_does_not_serve_is_named_with_those_it_does(tmp_path: Path) -> None:
    with PolicyServer("baseline", model_name="served-by-hand") as server:
        out = standalone_counting_imports(
            *("--env", "simple_env", "--base-url", server.base_url, "--model", "gpt-4"),
            *("--output-dir", str(tmp_path / "run")),
            cwd=tmp_path,
        )
    assert out["code"] == 1 and out["heavy"] == [], out
    assert "does not serve model 'gpt-4'; it serves: served-by-hand. Pass --model served-by-hand" in out["err"]


def test_an_endpoint_failing_every_rollout_is_said_once_with_its_count(tmp_path: Path, lists_then_fails: str) -> None:
    out = tmp_path / "run"
    result = subprocess.run(
        [sys.executable, "-m", "air.cli.main", "standalone", "--env", "simple_env", "--model", "m"]
        + ["--base-url", lists_then_fails, "--model-timeout", "5", "--steps", "2", "--batch-size", "4"]
        + ["--rollouts-per-example", "2", "--output-dir", str(out)],
        cwd=tmp_path,
        env={**os.environ, "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=backstop(300),
    )
    assert result.returncode == 1, result.stdout + result.stderr  # every rollout masked
    said = [line for line in result.stderr.splitlines() if "model crashed" in line]
    assert len(said) == 2, result.stderr  # the first, then its count at the end
    assert said[1].endswith("(x8 in all; each one is in run.log)"), said
    logged = [line for line in (out / "run.log").read_text().splitlines() if "model crashed" in line]
    assert len(logged) >= 8, "run.log keeps every line"
