"""Ctrl-C while the pool warms its containers: one quiet exit, no "Task exception was never retrieved"
traceback per starting container, and no container left behind."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid

import docker
import pytest

from air.sandbox.config import LABEL_RUN, SandboxConfig
from rigs.patience import backstop

pytestmark = pytest.mark.docker

# SIGINT as a terminal sends it, while starts are in flight: verifiers installs a handler that raises
# KeyboardInterrupt in the event loop itself (asyncio.run then tears the loop down), the way
# `air standalone` meets Ctrl-C. The signal is sent when the Nth shell of the pool starts (the first
# containers are being created, others are opening their shells), so the test does not hang on timing.
WARMING = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from air.sandbox import shell
    from air.sandbox.config import SandboxConfig
    from air.sandbox.pool import SandboxPool
    from air.sandbox.removal import install_exit_handlers

    signal.signal(signal.SIGINT, lambda sig, frame: signal.default_int_handler(sig, frame))
    install_exit_handlers()
    starts, original_start = [], shell.Shell.start

    async def start(self, *args, **kwargs):
        starts.append(self)
        if len(starts) == int(sys.argv[2]):
            asyncio.get_running_loop().call_soon(os.kill, os.getpid(), signal.SIGINT)
        return await original_start(self, *args, **kwargs)

    shell.Shell.start = start

    async def main():
        pool = await SandboxPool(SandboxConfig.model_validate_json(sys.argv[1]), size=4).start()
        await pool.acquire()
        await asyncio.sleep(60)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)
    """
)


@pytest.mark.parametrize("nth_start", [1, 2, 4])
def test_ctrl_c_while_containers_start_is_one_line_and_leaves_nothing(
    sandbox_config: SandboxConfig, nth_start: int
) -> None:
    run_id = f"pytest-sigint-{uuid.uuid4().hex[:8]}"
    config = sandbox_config.model_copy(update={"run_id": run_id})
    done = subprocess.run(
        [sys.executable, "-c", WARMING, config.model_dump_json(), str(nth_start)],
        capture_output=True,
        text=True,
        timeout=backstop(180),
    )
    assert done.returncode == 130, done.stderr[-3000:]
    assert "never retrieved" not in done.stderr, done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    left = docker.from_env().containers.list(all=True, ignore_removed=True, filters={"label": f"{LABEL_RUN}={run_id}"})
    assert not left, f"containers left behind: {[c.name for c in left]}"
