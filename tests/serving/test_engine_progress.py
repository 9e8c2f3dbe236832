"""The generation engine's bounds follow its progress, not a wall clock (air.serving.runtime.engine_progress): a
stalled engine fails a request with a message that says so; a request its caller gave up on stops costing
forward passes; closing waits for the pass in flight."""

from __future__ import annotations

import asyncio
import threading
import time
from pathlib import Path

import pytest

from air.serving.runtime.engine_progress import EngineStalled
from air.serving.runtime.generation_engine import GenerationEngine
from air.serving.runtime.sampling import SamplingParams
from air.serving.runtime.token_scorer import TokenScorer
from rigs.patience import backstop

MESSAGES = [{"role": "user", "content": "Write one command that lists the data files."}]
LONG = SamplingParams(temperature=1.0, max_tokens=400, ignore_eos=True, seed=1)


@pytest.fixture(scope="module")
def scorer(tiny_model_dir: Path) -> TokenScorer:
    return TokenScorer(tiny_model_dir)


def _until(condition, what: str, backstop_s: float = 120.0) -> None:
    """Wait for ``condition``; the backstop only keeps a broken engine from hanging the test."""
    end = time.monotonic() + backstop_s
    while not condition():
        assert time.monotonic() < end, what
        time.sleep(0.02)


def test_a_stalled_engine_fails_the_request_and_says_so(scorer, monkeypatch):
    release = threading.Event()
    forward = GenerationEngine._forward

    def blocked(self, *args):  # a worker that neither ends a pass nor uses CPU: hung
        release.wait()
        return forward(self, *args)

    monkeypatch.setattr(GenerationEngine, "_forward", blocked)
    engine = GenerationEngine(scorer, seed=0)
    try:
        with pytest.raises(EngineStalled, match="made no progress"):
            asyncio.run(engine.generate(scorer.prompt_ids(MESSAGES), LONG, stall_s=0.5))
    finally:
        release.set()
        engine.close()
    assert not engine._thread.is_alive()


def test_a_request_given_up_on_leaves_the_batch(scorer):
    engine = GenerationEngine(scorer, seed=0)

    async def give_up() -> None:
        task = asyncio.ensure_future(engine.generate(scorer.prompt_ids(MESSAGES), LONG))
        while engine.stats.generated_tokens < 3:
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    try:
        asyncio.run(give_up())
        _until(lambda: not engine._batches, "the engine kept generating the abandoned request")
        assert engine.stats.generated_tokens < LONG.max_tokens  # it stopped well before the request's end
    finally:
        engine.close()


def test_close_waits_for_the_forward_pass_in_flight(scorer, monkeypatch):
    started, passes = threading.Event(), []
    forward = GenerationEngine._forward

    def slow(self, *args):
        started.set()
        time.sleep(0.5)  # the pass in flight when close() is called
        passes.append(1)
        return forward(self, *args)

    monkeypatch.setattr(GenerationEngine, "_forward", slow)
    engine = GenerationEngine(scorer, seed=0)
    future = engine.submit(scorer.prompt_ids(MESSAGES), LONG)
    started.wait(timeout=backstop(120))
    engine.close()
    assert not engine._thread.is_alive() and passes
    with pytest.raises(RuntimeError, match="closed"):
        future.result(timeout=0)
