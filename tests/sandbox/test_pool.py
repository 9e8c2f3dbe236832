"""The pool against real containers: warm hand-out, background destruction, orphans, signals."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator

import docker
import pytest

from air.sandbox.config import LABEL_HOST, LABEL_PID, LABEL_RUN, SandboxConfig
from air.sandbox.pool import SandboxPool
from air.sandbox.removal import reap_orphans
from rigs.patience import backstop
from tests.containers import existing

pytestmark = pytest.mark.docker

# A child process that starts a pool of 2 plus one sandbox in use, prints the container ids,
# then waits to be signalled (or exits normally when told to). Its containers carry the host name it is
# given: see `alone_on_the_host`.
OWNER = textwrap.dedent(
    """
    import asyncio, json, socket, sys
    socket.gethostname = lambda: sys.argv[3]
    from air.sandbox.pool import SandboxPool
    from air.sandbox.config import SandboxConfig

    async def main():
        pool = await SandboxPool(SandboxConfig.model_validate_json(sys.argv[1]), size=2).start()
        in_use = await pool.acquire()
        await pool.wait_ready()
        ids = [in_use.id] + [sb.id for sb in pool._ready]
        print(json.dumps(ids), flush=True)
        if sys.argv[2] == "exit":
            return
        await asyncio.sleep(600)

    asyncio.run(main())
    """
)


@pytest.fixture
def alone_on_the_host(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A host name of this test's own, for its owners' containers and its reaping. Every pool that starts on
    this host (other suites', other runs') reaps the host's orphans, and `air clean --yes` removes them: under
    the real host name another process could take this test's orphans first, or its reaping take theirs."""
    host = f"pytest-{uuid.uuid4().hex[:12]}"
    monkeypatch.setattr(socket, "gethostname", lambda: host)
    yield host
    client = docker.from_env()  # nothing under that name outlives the test, even a failed one
    for container in client.containers.list(all=True, filters={"label": f"{LABEL_HOST}={host}"}, sparse=True):
        with contextlib.suppress(docker.errors.APIError):
            client.api.remove_container(container.id, force=True)
    client.close()


def _owner_ids(config: SandboxConfig, mode: str, host: str) -> tuple[subprocess.Popen[str], list[str]]:
    import json

    proc = subprocess.Popen(
        [sys.executable, "-c", OWNER, config.model_dump_json(), mode, host], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line, "owner process printed nothing"
    return proc, json.loads(line)


_existing = existing


def _wait_gone(ids: list[str], timeout: float = backstop(120)) -> set[str]:
    """Which of ``ids`` are still there once all are gone or ``timeout`` passed (generous: a loaded engine
    removes slowly; the wait ends as soon as they are gone)."""
    deadline = time.monotonic() + timeout
    while _existing(ids) and time.monotonic() < deadline:
        time.sleep(0.2)
    return _existing(ids)


async def test_an_acquire_right_after_the_pool_opens_starts_its_own_container(sandbox_config: SandboxConfig) -> None:
    # docs/sandbox.md: opening waits for no container, and an acquire with none ready starts one at once, beside
    # the pool's warming ones (a cold start under their contention), rather than waiting for a warm one.
    config = sandbox_config.model_copy(update={"run_id": f"pytest-first-{uuid.uuid4().hex[:8]}"})
    async with SandboxPool(config, size=2) as pool:
        assert pool.ready_count == 0
        sandbox = await pool.acquire()
        try:
            await pool.wait_ready()
            client = docker.from_env()
            try:
                ours = {c.id for c in client.containers.list(filters={"label": f"{LABEL_RUN}={config.run_id}"})}
            finally:
                client.close()
            assert ours == {sandbox.id, *(sb.id for sb in pool._ready)} and len(ours) == 3  # its own + 2 warm
        finally:
            pool.release(sandbox)


async def test_acquire_is_warm_and_release_destroys(sandbox_config: SandboxConfig) -> None:
    async with SandboxPool(sandbox_config, size=2) as pool:
        await pool.wait_ready()
        ready_ids = {sb.id for sb in pool._ready}
        sandbox = await pool.acquire()
        assert sandbox.id in ready_ids  # handed out warm, not started on demand
        assert (await sandbox.run("echo ok")).output == "ok\n"
        await pool.wait_ready()  # refilled in the background
        assert sandbox.id not in {sb.id for sb in pool._ready}
        pool.release(sandbox)
        assert not await asyncio.to_thread(_wait_gone, [sandbox.id])
        left = [sb.id for sb in pool._ready]
    assert not await asyncio.to_thread(_wait_gone, left)  # close removed the ready ones


def test_an_abandoned_pool_destroys_its_ready_containers(sandbox_config: SandboxConfig) -> None:
    """A pool whose event loop has ended (as when an env moves to a new loop) can still be emptied."""

    async def fill() -> SandboxPool:
        pool = SandboxPool(sandbox_config, size=2)
        await pool.start()
        await pool.wait_ready()
        return pool

    pool = asyncio.run(fill())  # that loop is closed now
    ids = [sb.id for sb in pool._ready]
    assert len(ids) == 2 and _existing(ids)
    pool.abandon()
    assert not _wait_gone(ids)
    pool._refill()  # closed: returns at once (an open pool would need the dead loop and raise)
    assert pool.ready_count == 0 and pool._starting == 0


async def test_a_dead_ready_container_is_replaced(sandbox_config: SandboxConfig) -> None:
    async with SandboxPool(sandbox_config, size=1) as pool:
        await pool.wait_ready()
        stale = pool._ready[0]
        await asyncio.to_thread(stale.container.kill)
        sandbox = await pool.acquire()
        assert sandbox.id != stale.id and (await sandbox.run("echo fresh")).output == "fresh\n"
        pool.release(sandbox)


def test_orphans_of_a_sigkilled_owner_are_reaped(sandbox_config: SandboxConfig, alone_on_the_host: str) -> None:
    proc, ids = _owner_ids(sandbox_config, "wait", alone_on_the_host)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=backstop(30))
    assert _existing(ids) == set(ids)  # SIGKILL leaves them behind...
    reaped = reap_orphans()
    assert set(ids) <= set(reaped)  # ...and the next start removes them
    assert not _existing(ids)


def test_a_container_removed_by_its_owner_while_we_reap_is_skipped(
    sandbox_config: SandboxConfig, monkeypatch: pytest.MonkeyPatch, alone_on_the_host: str
) -> None:
    """The race that prime-rl's env workers hit (one per env, each starting its pool while the others
    finish rollouts): a container listed by the reaper is removed by its live owner before the SDK
    inspects it. Staged exactly: the inspect of the live owner's first listed container removes it
    first. The reaper must go on (it once raised the 404, failing a rollout's set-up) and still reap
    the orphans."""
    from docker.models.containers import ContainerCollection

    live, live_ids = _owner_ids(sandbox_config, "wait", alone_on_the_host)
    dead, dead_ids = _owner_ids(sandbox_config, "wait", alone_on_the_host)
    dead.send_signal(signal.SIGKILL)
    dead.wait(timeout=backstop(30))
    original_get = ContainerCollection.get
    vanished: list[str] = []

    def get_after_its_owner_removed_it(self, container_id: str, *args, **kwargs):
        if not vanished and container_id in live_ids:
            vanished.append(container_id)
            docker.from_env().containers.get(container_id).remove(force=True)
        return original_get(self, container_id, *args, **kwargs)

    monkeypatch.setattr(ContainerCollection, "get", get_after_its_owner_removed_it)
    try:
        reaped = reap_orphans()
    finally:
        monkeypatch.setattr(ContainerCollection, "get", original_get)
        live.send_signal(signal.SIGTERM)
        live.wait(timeout=backstop(60))
    assert vanished, "the race was not staged: no container of the live owner was listed"
    assert set(dead_ids) <= set(reaped) and not _existing(dead_ids)


def test_reaping_spares_containers_of_live_owners(sandbox_config: SandboxConfig, alone_on_the_host: str) -> None:
    proc, ids = _owner_ids(sandbox_config, "wait", alone_on_the_host)
    try:
        reaped = reap_orphans()
        assert not set(ids) & set(reaped) and _existing(ids) == set(ids)
        labels = docker.from_env().containers.get(ids[0]).labels
        assert labels[LABEL_PID] == str(proc.pid)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=backstop(60))


@pytest.mark.parametrize("how", ["SIGTERM", "SIGINT", "exit"])
def test_owner_cleans_up_on_signals_and_exit(sandbox_config: SandboxConfig, how: str, alone_on_the_host: str) -> None:
    proc, ids = _owner_ids(sandbox_config, "exit" if how == "exit" else "wait", alone_on_the_host)
    if how != "exit":
        proc.send_signal(getattr(signal, how))
    proc.wait(timeout=backstop(60))
    assert not _wait_gone(ids), f"containers left after {how}"


async def test_start_reaps_orphans(sandbox_config: SandboxConfig, alone_on_the_host: str) -> None:
    proc, ids = await asyncio.to_thread(_owner_ids, sandbox_config, "wait", alone_on_the_host)
    os.kill(proc.pid, signal.SIGKILL)
    await asyncio.to_thread(proc.wait, 30)
    async with SandboxPool(sandbox_config, size=0):
        assert not _existing(ids)


async def test_a_failed_reap_does_not_fail_the_rollout_that_started_the_pool(
    sandbox_config: SandboxConfig, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    import air.sandbox.pool as pool_module  # reap_orphans as the pool calls it

    def engine_hiccup(client=None):
        raise docker.errors.APIError("500 Server Error: the engine was busy")

    monkeypatch.setattr(pool_module, "reap_orphans", engine_hiccup)
    async with SandboxPool(sandbox_config, size=0) as pool:
        sandbox = await pool.acquire()
        assert (await sandbox.run("echo ok")).output.strip() == "ok"
        pool.release(sandbox)
    assert "could not reap containers of dead runs" in caplog.text


def test_removing_a_container_another_process_is_removing_succeeds(docker_image: str) -> None:
    """Two runs on one host reap the same orphan at once: the engine answers the second removal with 409
    'removal already in progress'. That is success (it waits until the container is gone), not an error that
    stops the reaping of the rest (seen: a suite beside this one made test_start_reaps_orphans fail)."""
    import threading

    from air.sandbox.container import destroy_container

    client = docker.from_env()
    for _ in range(3):
        container = client.containers.run(docker_image, ["sleep", "100"], detach=True, init=True, network_mode="none")
        errors: list[BaseException] = []

        def remove(container_id: str = container.id, errors: list[BaseException] = errors) -> None:
            try:
                destroy_container(container_id)
            except BaseException as exc:
                errors.append(exc)

        threads = [threading.Thread(target=remove) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        with pytest.raises(docker.errors.NotFound):
            client.containers.get(container.id)
