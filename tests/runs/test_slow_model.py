"""A model on this CPU is slow by nature (issue 53, item 1): the run plays however slowly its own model
writes, as long as the model progresses; a real time-out names the option that sets it; and the process
ends cleanly (exit 0, never 134) even when the model was still inside a forward pass at the end.

The engine is slowed deterministically: each forward pass first sleeps (the real pass follows), so every
request takes at least its passes' sleeps, longer than the client's time limit twice over."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from air.cli.main import main
from air.runs.standalone import run_standalone
from air.runs.standalone_settings import StandaloneSettings
from air.serving.runtime.generation_engine import GenerationEngine
from rigs.patience import backstop
from tests.json_endpoint import JsonEndpoint, serve

ROOT = Path(__file__).resolve().parents[2]
PACE_S = 1.5  # each forward pass's sleep: no pass ends and no CPU is used meanwhile, yet it is no stall
TIMEOUT_S = 5.0  # --model-timeout: well over one pass's sleep, under a request's (12 tokens: 13 passes)


@pytest.fixture
def slow_engine(monkeypatch: pytest.MonkeyPatch) -> None:
    forward = GenerationEngine._forward

    def paced(self, *args):
        time.sleep(PACE_S)
        return forward(self, *args)

    monkeypatch.setattr(GenerationEngine, "_forward", paced)


def _settings(tmp_path: Path, policy: str, **more) -> StandaloneSettings:
    return StandaloneSettings(
        env="simple_env",
        policy=policy,
        steps=1,
        batch_size=2,
        rollouts_per_example=2,
        max_turns=1,
        max_tokens=12,
        model_timeout=TIMEOUT_S,
        output_dir=str(tmp_path / "run"),
        **more,
    )


@pytest.mark.timeout(600)
def test_a_local_model_slower_than_the_model_timeout_still_plays(tiny_model_dir: Path, tmp_path: Path, slow_engine):
    summary = asyncio.run(run_standalone(_settings(tmp_path, f"model:{tiny_model_dir}")))
    assert summary["status"] == "completed"
    assert summary["masked"] == 0, summary["masked_causes"]
    assert summary["steps"][0]["reward_mean"] is not None


class _Silent(JsonEndpoint):
    """Answers the model listing; takes a completion request and never answers it."""

    release = threading.Event()

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        self.release.wait()


@pytest.fixture
def silent_endpoint() -> Iterator[str]:
    _Silent.release.clear()
    try:
        yield from serve(_Silent)
    finally:
        _Silent.release.set()


@pytest.mark.timeout(300)
def test_a_real_time_out_names_the_option_to_raise(tmp_path: Path, silent_endpoint: str, capsys):
    out = tmp_path / "run"
    argv = ["standalone", "--env", "simple_env", "--steps", "1", "--batch-size", "2", "--rollouts-per-example", "2"]
    argv += ["--base-url", silent_endpoint, "--model", "m", "--model-timeout", "1", "--output-dir", str(out)]
    assert main(argv) == 1  # every rollout masked
    said = capsys.readouterr()
    lines = [line for line in (said.out + said.err).splitlines() if "--model-timeout" in line]
    assert any("raise --model-timeout" in line for line in lines), said.out + said.err
    causes = json.loads((out / "summary.json").read_text())["masked_causes"]
    assert list(causes) == [next(iter(causes))] and "--model-timeout (1 s" in next(iter(causes)), causes


# The run's end finds the engine inside a long forward pass (native torch work: a thread in torch when
# the interpreter exits aborts it, exit 134): longer than the client's 2 x 3 s and a 30 s wait at shutdown.
_HEAVY_FIRST_PASS = textwrap.dedent(
    """
    import sys, time, torch
    from air.serving.runtime.generation_engine import GenerationEngine
    forward, passes = GenerationEngine._forward, []

    def heavy(self, *args):
        if not passes:
            a, end = torch.randn(600, 600), time.monotonic() + 45
            while time.monotonic() < end:
                a = torch.tanh(a @ a)
        passes.append(1)
        return forward(self, *args)

    GenerationEngine._forward = heavy
    from air.cli.main import main
    sys.exit(main(sys.argv[1:]))
    """
)


@pytest.mark.timeout(600)
def test_the_process_exits_cleanly_after_a_run_with_the_local_model(tiny_model_dir: Path, tmp_path: Path):
    argv = ["standalone", "--env", "simple_env", "--policy", f"model:{tiny_model_dir}", "--steps", "1"]
    argv += ["--batch-size", "2", "--rollouts-per-example", "2", "--max-turns", "1", "--max-tokens", "4"]
    argv += ["--model-timeout", "3", "--output-dir", str(tmp_path / "run")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this tree's air, whatever is installed
    done = subprocess.run(
        [sys.executable, "-c", _HEAVY_FIRST_PASS, *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=backstop(540),
    )
    said = done.stdout + done.stderr
    assert "terminate called" not in said, said
    assert done.returncode == 0, said
