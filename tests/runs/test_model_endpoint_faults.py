"""A model endpoint that hangs or fails: the rollout is masked within minutes (``--model-timeout``, one
retry), and its trajectory's ``error`` names the cause (type, HTTP status, the endpoint's own message)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from air.cli.main import main
from air.env.trajectory_reader import iter_trajectory_paths, load_trajectory
from tests.json_endpoint import JsonEndpoint, serve

pytestmark = pytest.mark.docker

BODY = {"error": {"message": "model crashed: CUDA out of memory", "type": "InternalServerError", "code": 500}}


class _Failing(JsonEndpoint):
    # The model listing answers (the run asks it once before starting): the completions fail.
    models = (200, {"object": "list", "data": [{"id": "default", "object": "model"}]})
    chat = (500, BODY)


class _Hanging(_Failing):
    def do_POST(self) -> None:  # noqa: N802
        time.sleep(30)  # longer than the test's --model-timeout, twice over


@pytest.fixture
def failing_endpoint() -> Iterator[str]:
    yield from serve(_Failing)


@pytest.fixture
def hanging_endpoint() -> Iterator[str]:
    yield from serve(_Hanging)


def _run(tmp_path: Path, docker_image: str, base_url: str) -> list:
    out = tmp_path / "run"
    argv = ["standalone", "--steps", "1", "--batch-size", "2", "--rollouts-per-example", "2", "--output-dir", str(out)]
    argv += ["--base-url", base_url, "--model-timeout", "2", "--env-arg", f"image={docker_image}"]
    assert main(argv) == 1  # every rollout masked
    records = [load_trajectory(p) for p in iter_trajectory_paths(out / "trajectories")]
    assert len(records) == 2
    return records


@pytest.mark.timeout(300)
def test_an_http_500_names_status_and_message(tmp_path: Path, docker_image: str, failing_endpoint: str) -> None:
    for record in _run(tmp_path, docker_image, failing_endpoint):
        assert "InternalServerError" in record.error and "500" in record.error, record.error
        assert "CUDA out of memory" in record.error, record.error


@pytest.mark.timeout(300)
def test_a_hung_endpoint_fails_in_twice_the_model_timeout(
    tmp_path: Path, docker_image: str, hanging_endpoint: str
) -> None:
    # openai's default (600 s, two retries) would keep this past the test's own 300 s limit.
    for record in _run(tmp_path, docker_image, hanging_endpoint):
        assert "Timeout" in record.error, record.error
