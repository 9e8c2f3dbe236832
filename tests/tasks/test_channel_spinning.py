"""When the call channel spins and when it sleeps (spin_policy and Channel._await), with real processes
and the kernel's own scheduler statistics; and the runner's split of CPUs between evaluator and worker."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

SCRIPTS = Path(__file__).resolve().parents[2] / "air" / "tasks" / "scripts"
sys.path.insert(0, str(SCRIPTS))

import call_channel  # noqa: E402
import eval_runner  # noqa: E402
import spin_policy  # noqa: E402
from call_channel import BACKOFF_AFTER, PROBE_EVERY, Channel, ChannelTimeout  # noqa: E402

needs_schedstat = pytest.mark.skipif(not Path("/proc/self/schedstat").exists(), reason="no /proc/PID/schedstat")


@pytest.mark.parametrize(("text", "count"), [("0", 1), ("0-1\n", 2), ("0-3,8,10-11", 7)])
def test_kernel_cpu_lists_are_counted(text, count):
    assert spin_policy._cpu_list_size(text) == count


def test_the_spin_budget_follows_the_cpus_the_container_has(monkeypatch):
    monkeypatch.setattr(spin_policy, "usable_cpus", lambda: 1.0)
    assert spin_policy.spin_budget_s() == 0.0
    monkeypatch.setattr(spin_policy, "usable_cpus", lambda: 2.0)
    assert spin_policy.spin_budget_s() > 0


def test_pinning_this_process_does_not_count_as_losing_cpus():
    """The runner pins the evaluator and the worker to different CPUs; each must still spin."""
    before = spin_policy.usable_cpus()
    mine = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(mine)})
        pinned = spin_policy.usable_cpus()
    finally:
        os.sched_setaffinity(0, mine)
    if Path("/sys/fs/cgroup/cpuset.cpus.effective").exists() or Path("/sys/fs/cgroup/cpuset").exists():
        assert pinned == before
    else:
        pytest.skip("no cgroup CPU set to read here: the affinity is all there is")


def test_the_runner_gives_the_worker_one_cpu_and_the_evaluator_the_others():
    evaluator, worker = eval_runner.split_cpus()
    ours = os.sched_getaffinity(0)
    if len(ours) < 2:
        assert (evaluator, worker) == (None, None)
        return
    assert len(worker) == 1 and worker <= ours
    assert evaluator == ours - worker


@pytest.fixture
def channel():
    """The evaluator's side of a channel whose peer pid we set by hand; nothing ever answers it."""
    region = os.memfd_create("test-channel")
    os.ftruncate(region, call_channel.REGION_SIZE)
    mine, other = socket.socketpair()
    chan = Channel("evaluator", region, mine.detach())
    chan.spin_s = 200e-6  # spin whatever this machine has, so that the policy is what is tested
    yield chan
    chan.wake.close()
    chan.region.close()
    other.close()
    os.close(region)


def _set_peer(chan: Channel, pid: int) -> None:
    spin_policy._PID.pack_into(chan.region, call_channel._PIDS_AT + 4, pid)
    chan._peer_waits = spin_policy.PeerWaits(chan.region, call_channel._PIDS_AT + 4)


def _wait_nothing(chan: Channel) -> None:
    with pytest.raises(ChannelTimeout):
        chan._await(chan._recv_at, chan.region[chan._recv_at], 0.002)


@needs_schedstat
def test_a_peer_busy_with_its_own_work_keeps_us_spinning(channel):
    """A failed spin while the peer runs (or sleeps) unhindered is no sign of a busy host."""
    code = "import time; print('asleep', flush=True); time.sleep(30)"
    peer = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        # Its start-up may wait for a CPU on a busy host: begin once it sleeps and that is out of the window.
        assert peer.stdout.readline() == "asleep\n"
        time.sleep(4 * call_channel.CONTENTION_WINDOW_NS / 1e9)
        _set_peer(channel, peer.pid)
        for _ in range(BACKOFF_AFTER + 4):
            _wait_nothing(channel)
        assert channel._failed_spins == 0
    finally:
        peer.kill()
        peer.wait()


@needs_schedstat
def test_a_peer_kept_waiting_for_a_cpu_makes_us_back_off(channel):
    """Three busy processes on one CPU: the peer waits about two thirds of the time, so our spins take
    a CPU somebody wants, and the count of failed spins climbs to the back-off."""
    cpu = min(os.sched_getaffinity(0))
    busy = f"import os, time\nos.sched_setaffinity(0, {{{cpu}}})\nend = time.time() + 60\nwhile time.time() < end: pass"
    hogs = [subprocess.Popen([sys.executable, "-c", busy]) for _ in range(3)]
    try:
        time.sleep(0.3)  # all three running and competing
        _set_peer(channel, hogs[0].pid)
        for _ in range(20 * BACKOFF_AFTER):
            _wait_nothing(channel)
            if channel._failed_spins >= BACKOFF_AFTER:
                break
        assert channel._failed_spins >= BACKOFF_AFTER
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()


def test_backing_off_spins_only_every_probe_every_th_wait(channel):
    channel._failed_spins = 10 * BACKOFF_AFTER
    looks = []
    channel._peer_waits = lambda: looks.append(1)  # None: unknown, which counts as busy
    for _ in range(2 * PROBE_EVERY):
        _wait_nothing(channel)
    assert len(looks) == 2  # one look (after 20 us of spinning) per probe, two probes
    assert channel._failed_spins == 10 * BACKOFF_AFTER + 2


def test_an_unknowable_peer_counts_as_busy(channel):
    _set_peer(channel, 2**31 - 1)  # no such process: its schedstat cannot be read
    for _ in range(BACKOFF_AFTER):
        _wait_nothing(channel)
    assert channel._failed_spins == BACKOFF_AFTER


def test_a_peer_that_has_not_started_is_not_busy(channel):
    _set_peer(channel, 0)
    for _ in range(BACKOFF_AFTER + 2):
        _wait_nothing(channel)
    assert channel._failed_spins == 0
