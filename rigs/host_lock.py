"""One holder at a time on this host, across processes, xdist workers and suites: an flock on a file."""

from __future__ import annotations

import fcntl
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
