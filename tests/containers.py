"""Asking Docker about this test's own containers only: other runs and suites on the host create and remove
theirs meanwhile, so a test never lists, counts or inspects the host's containers as a whole."""

from __future__ import annotations

from collections.abc import Iterable

import docker


def existing(ids: Iterable[str]) -> set[str]:
    """Which of ``ids`` still exist, in any state (removal under way included). One listing filtered by id
    and nothing inspected: a container another process removes meanwhile cannot fail the call."""
    wanted = set(ids)
    if not wanted:
        return set()
    client = docker.from_env()
    try:
        found = client.containers.list(all=True, filters={"id": sorted(wanted)}, sparse=True)
    finally:
        client.close()
    return {c.id for c in found} & wanted  # the id filter also matches prefixes
