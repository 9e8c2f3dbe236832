"""One holder at a time on this host, across processes, xdist workers and suites: an flock on a file."""

from __future__ import annotations

import fcntl
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def host_lock(path: Path) -> Iterator[None]:
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


# prime-rl's `rl` takes fixed ports (air/launch/rl_checks.py): the tests that run it, or that hold those ports to see
# it refused, take this lock, across workers and suites.
RL_PORTS_LOCK = Path("/tmp/air-test-prime-rl-rl.lock")


@contextmanager
def rl_ports(wait_s: float = 1800.0) -> Iterator[None]:
    """This host's prime-rl ports for a test: the lock above, then the ports free of anything outside the suites (a
    user's own `uv run rl`): the test waits for that run to end rather than fail on its ports, up to ``wait_s``."""
    from air.launch.rl_checks import busy_port_problem

    with host_lock(RL_PORTS_LOCK):
        deadline = time.monotonic() + wait_s
        while problem := busy_port_problem("v1"):
            if time.monotonic() > deadline:
                raise AssertionError(f"waited {wait_s:.0f} s for this host's prime-rl ports: {problem}")
            time.sleep(2)
        yield
