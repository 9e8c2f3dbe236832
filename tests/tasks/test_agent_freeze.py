"""The freeze's signal sender (air/tasks/scripts/agent_freeze.py), run for real on this host as root with a
uid no process has: it holds no descriptor and cannot be traced by that uid, and a sender that is stopped
(what an agent could do to it) is waited for a bounded time, never for good."""

from __future__ import annotations

import os
import secrets
import signal
import tempfile
import time
from pathlib import Path

import pytest

from air.tasks.scripts import agent_freeze

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the sender changes its uid: needs root")


@pytest.fixture
def nobody_uid() -> int:
    """A uid of this test's own, which no process on the host has (kill(-1) as it reaches nothing): a fixed one
    was seen running when another suite's stopped sender held it at the same moment."""
    return 1_000_000 + secrets.randbelow(1_000_000_000)


def test_a_sender_finishes_and_nothing_of_the_uid_runs(nobody_uid):
    assert agent_freeze.signal_all_as(nobody_uid, 0) is True
    assert agent_freeze.running_processes(nobody_uid) == []


def test_a_stopped_sender_is_not_waited_for_beyond_its_bound(monkeypatch, nobody_uid):
    def stop_myself(signum):  # in the sender: what an agent's SIGSTOP at the wrong moment does
        os.kill(os.getpid(), signal.SIGSTOP)

    monkeypatch.setattr(agent_freeze, "_send", stop_myself)
    started = time.monotonic()
    finished = agent_freeze.signal_all_as(nobody_uid, signal.SIGSTOP)
    waited = time.monotonic() - started
    assert finished is False
    assert waited < agent_freeze.SENDER_WAIT_S * 5, waited  # bounded (a generous margin: a loaded machine)


def test_the_sender_holds_no_descriptor_and_keeps_a_root_saved_uid(monkeypatch, nobody_uid):
    fd, report = tempfile.mkstemp(prefix="air-sender-")  # in /tmp (1777): the sender can open it
    os.close(fd)
    os.chmod(report, 0o666)

    def describe(signum):  # in the sender, after it changed its uids and closed every descriptor
        held = os.listdir("/proc/self/fd")  # listing opens one
        out = os.open(report, os.O_WRONLY)
        os.write(out, f"{len(held)} {os.getresuid()}".encode())
        os.close(out)

    monkeypatch.setattr(agent_freeze, "_send", describe)
    try:
        assert agent_freeze.signal_all_as(nobody_uid, 0) is True
        count, ids = Path(report).read_text().split(" ", 1)
    finally:
        os.unlink(report)
    assert count == "1", f"the sender held {int(count) - 1} descriptors"
    assert ids == f"({nobody_uid}, {nobody_uid}, 0)", ids
