"""The pool under a Docker engine that stops, restarts or stays away: a second, real engine
(tests/second_engine.py) is stopped and started under a running pool."""

from __future__ import annotations

import asyncio
import secrets

import pytest

from air.sandbox.config import SandboxConfig
from air.sandbox.container import reset_docker_client
from air.sandbox.errors import EngineGone, SandboxDied
from air.sandbox.pool import SandboxPool
from rigs.patience import backstop
from tests.second_engine import SecondEngine


@pytest.fixture
def engine(second_engine: SecondEngine, monkeypatch: pytest.MonkeyPatch):
    """This process's Docker client on the second engine, which answers when the test starts."""
    second_engine.start()
    monkeypatch.setenv("DOCKER_HOST", second_engine.address)
    reset_docker_client()
    yield second_engine
    reset_docker_client()  # the next docker_client() is made after monkeypatch restores DOCKER_HOST


def _config(engine: SecondEngine, wait_s: float = 120) -> SandboxConfig:
    return SandboxConfig(image=engine.image, engine_wait_s=wait_s, run_id=f"test-engine-{secrets.token_hex(4)}")


async def _until_none_left(engine: SecondEngine, run_id: str, timeout: float = backstop(30)) -> list[str]:
    left = engine.containers(run_id)
    for _ in range(int(timeout * 4)):
        if not left:
            break
        await asyncio.sleep(0.25)
        left = engine.containers(run_id)
    return left


async def test_a_lost_engine_costs_only_the_rollouts_it_was_running(engine: SecondEngine) -> None:
    config = _config(engine)
    async with SandboxPool(config, size=2) as pool:
        await pool.wait_ready()
        in_use = await pool.acquire()
        assert (await in_use.run("echo before")).output.strip() == "before"

        await asyncio.to_thread(engine.stop)
        with pytest.raises(SandboxDied) as died:
            await in_use.run("echo during")
        fault = await pool.engine_fault(in_use, died.value)
        assert fault is not None and f"Docker engine unreachable at {engine.address}" in str(fault)
        pool.release(in_use)  # fails while the engine is away: tried again once it answers

        waiting = asyncio.ensure_future(pool.acquire())
        await asyncio.sleep(2)
        assert not waiting.done(), "a new rollout must wait for the engine, not fail"

        await asyncio.to_thread(engine.start)
        fresh = await asyncio.wait_for(waiting, backstop(120))
        assert (await fresh.run("echo after")).output.strip() == "after"
        assert fresh.generation == pool.generation > in_use.generation
        assert pool.engine_losses == 1
        pool.release(fresh)
        await pool.wait_ready()
    # The containers the stop killed, the one whose removal failed, the ready and used ones: all gone.
    assert await _until_none_left(engine, config.run_id) == []


async def test_containers_a_quick_restart_stopped_are_never_handed_out(engine: SecondEngine) -> None:
    config = _config(engine)
    async with SandboxPool(config, size=2) as pool:
        await pool.wait_ready()
        before = {sandbox.id for sandbox in pool._ready}
        await asyncio.to_thread(engine.stop)  # while nobody uses the pool: it notices only at the next acquire
        await asyncio.to_thread(engine.start)
        for _ in range(2):
            sandbox = await pool.acquire()
            assert sandbox.id not in before
            assert (await sandbox.run("echo ok")).output.strip() == "ok"
            pool.release(sandbox)
        assert pool.engine_losses == 1  # one restart, noticed once
    assert await _until_none_left(engine, config.run_id) == []


async def test_an_engine_that_stays_away_stops_new_rollouts_after_the_wait(engine: SecondEngine) -> None:
    config = _config(engine, wait_s=3)
    async with SandboxPool(config, size=1) as pool:
        await pool.wait_ready()
        await asyncio.to_thread(engine.stop)
        with pytest.raises(EngineGone, match="Docker engine unreachable at .*engine_wait is 3 s"):
            await pool.acquire()
        await asyncio.to_thread(engine.start)
        sandbox = await asyncio.wait_for(pool.acquire(), backstop(60))  # back: the next rollout starts again
        assert (await sandbox.run("echo ok")).output.strip() == "ok"
        pool.release(sandbox)
    assert await _until_none_left(engine, config.run_id) == []


async def test_one_container_dying_is_not_blamed_on_the_engine(sandbox_config: SandboxConfig) -> None:
    """The engine answers and the other containers run: the death is the container's own (its message,
    not the engine's), and the pool's generation stays."""
    async with SandboxPool(sandbox_config, size=1) as pool:
        await pool.wait_ready()
        sandbox = await pool.acquire()
        await asyncio.to_thread(sandbox.container.kill)
        with pytest.raises(SandboxDied) as died:
            await sandbox.run("echo gone")
        assert await pool.engine_fault(sandbox, died.value) is None
        assert pool.engine_losses == 0 and pool.generation == 0 and pool.engine_ok
        pool.release(sandbox)
        fresh = await pool.acquire()  # the ready one still runs: handed out as usual
        assert (await fresh.run("echo ok")).output.strip() == "ok"
        pool.release(fresh)
