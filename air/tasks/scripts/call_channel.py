"""The call channel between the trusted evaluator and the agent's worker process (stdlib only: it runs
inside the sandbox, in both processes).

A game's evaluation calls the agent's function ~100,000 times, each answered in microseconds, so a
socket round trip per call (~40 us in Python) would multiply the evaluation's time. Requests and
replies go through a shared memory region instead; the waiting side spins briefly (both run on their
own core while the agent's other processes are frozen) and then sleeps on a socket that the other
side writes one byte to, only when the sleeper's flag says it sleeps. With fewer than two CPUs, or
while spins keep finding nothing (a host busy with many evaluations), it sleeps at once.

Layout: two slots (request, reply), each [ready byte | pad | seq u64 | length u32 | pad | payload]; one
sleep flag per side. A message is published by its one-byte ready mark, written after everything else
(one byte cannot be seen half-written; x86-64 keeps stores in order). Either side may scribble
anything into the region: the evaluator reads only the reply slot and checks its sequence number and
length; the payload is decoded with plain-data decoders only.
"""

from __future__ import annotations

import mmap
import os
import select
import socket
import struct
import time

SLOT_HEADER = 64
SLOT_CAPACITY = 8 * 1024 * 1024  # largest request or reply; larger ones are refused with a clear error
_HEADER = struct.Struct("=QI")  # native: each field one aligned store, never seen half-written
_HEADER_AT = 8  # [ready byte | pad | seq u64 | length u32]: the ready byte (seq % 256) is written last
REQUEST, REPLY = 0, 1
EVALUATOR_SLEEPS, WORKER_SLEEPS = 0, 1
_FLAGS_AT = 2 * (SLOT_HEADER + SLOT_CAPACITY)
REGION_SIZE = _FLAGS_AT + 64
SLEEP_POLL_S = 0.005  # a wake byte can be missed in a rare race; a sleeper re-checks this often


CALLABLE_MARK = {"__air_callable__": True}  # the worker's word for "a function" (never a to_plain value)


class ChannelClosed(Exception):
    """The other side is gone or broke the protocol."""


class ChannelTimeout(Exception):
    """No reply within the time limit."""


def spin_budget_s() -> float:
    """How long to spin before sleeping: 200 us with two or more CPUs for us, else 0."""
    try:
        quota, period = open("/sys/fs/cgroup/cpu.max").read().split()
        cpus = float("inf") if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        cpus = float("inf")
    cpus = min(cpus, len(os.sched_getaffinity(0)))
    return 200e-6 if cpus >= 2 else 0.0


class Channel:
    """One side of the channel. ``side`` is ``"evaluator"`` (sends requests) or ``"worker"`` (replies)."""

    def __init__(self, side: str, region_fd: int, wake_fd: int) -> None:
        self.region = mmap.mmap(region_fd, REGION_SIZE)
        self.wake = socket.socket(fileno=wake_fd)
        self.wake.setblocking(False)
        evaluator = side == "evaluator"
        self._send_at = (REQUEST if evaluator else REPLY) * (SLOT_HEADER + SLOT_CAPACITY)
        self._recv_at = (REPLY if evaluator else REQUEST) * (SLOT_HEADER + SLOT_CAPACITY)
        self._my_flag = _FLAGS_AT + (EVALUATOR_SLEEPS if evaluator else WORKER_SLEEPS)
        self._peer_flag = _FLAGS_AT + (WORKER_SLEEPS if evaluator else EVALUATOR_SLEEPS)
        self.spin_s = spin_budget_s()
        self._failed_spins = self._skip = 0  # adaptive spinning (see _await)

    # --- slots (hot path: kept to a few attribute look-ups per message) --------------------------

    def send(self, seq: int, payload: bytes) -> None:
        size = len(payload)
        if size > SLOT_CAPACITY:
            raise ValueError(f"message of {size} bytes exceeds the channel's {SLOT_CAPACITY} bytes")
        region, at = self.region, self._send_at
        region[at + SLOT_HEADER : at + SLOT_HEADER + size] = payload
        _HEADER.pack_into(region, at + _HEADER_AT, seq, size)
        region[at] = seq & 0xFF  # last: publishes the message
        if region[self._peer_flag]:
            try:
                self.wake.send(b"w")
            except (BlockingIOError, InterruptedError):
                pass  # a byte is already waiting
            except OSError as exc:
                raise ChannelClosed(f"the other side is gone ({exc})") from exc

    def exchange(self, seq: int, payload: bytes, timeout_s: float) -> tuple[int, bytes]:
        """The evaluator's call: send request ``seq``, wait for the reply after it."""
        self.send(seq, payload)
        return self.receive(seq - 1, timeout_s)

    def serve(self, handle) -> None:
        """The worker's loop: each request's payload -> ``handle(payload)`` -> the reply, until closed."""
        region, rat = self.region, self._recv_at
        unpack = _HEADER.unpack_from
        seq = 0
        while True:
            old = seq & 0xFF
            if region[rat] == old:
                self._await(rat, old, None)
            seq, size = unpack(region, rat + _HEADER_AT)
            if size > SLOT_CAPACITY:
                raise ChannelClosed(f"malformed message length {size}")
            self.send(seq, handle(region[rat + SLOT_HEADER : rat + SLOT_HEADER + size]))

    def receive(self, after: int, timeout_s: float | None = None) -> tuple[int, bytes]:
        """Wait for the message after number ``after``; returns (its seq as written, payload)."""
        region, at, old = self.region, self._recv_at, after & 0xFF
        if region[at] == old:
            self._await(at, old, timeout_s)
        seq, size = _HEADER.unpack_from(region, at + _HEADER_AT)
        if size > SLOT_CAPACITY:
            raise ChannelClosed(f"malformed message length {size}")
        return seq, region[at + SLOT_HEADER : at + SLOT_HEADER + size]

    def _await(self, at: int, old: int, timeout_s: float | None) -> None:
        """Wait until the ready byte at ``at`` changes: spin while spinning pays, else sleep.

        A spin pays when the peer is running on another core. On a busy host (many evaluations at once)
        it is not, and spinning would take the CPU it waits for: after 16 spins in a row that found
        nothing, the next 1, 2, 4 ... 4096 waits sleep straight away (one slow answer now and then, a
        garbage collection, say, changes nothing); a spin that finds the message resets that."""
        if self.spin_s and not self._skip:
            region, clock = self.region, time.perf_counter
            spin_until = clock() + self.spin_s
            while True:
                for _ in range(64):  # check the clock only now and then
                    if region[at] != old:
                        self._failed_spins = 0
                        return
                if clock() > spin_until:
                    break
            self._failed_spins += 1
            if self._failed_spins >= 16:
                self._skip = 1 << min(self._failed_spins - 16, 12)
        elif self._skip:
            self._skip -= 1
        self._sleep(old, timeout_s)

    def _sleep(self, old: int, timeout_s: float | None) -> None:
        region, at, flag = self.region, self._recv_at, self._my_flag
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        try:
            while True:
                region[flag] = 1
                if region[at] != old:
                    return
                left = SLEEP_POLL_S if deadline is None else min(SLEEP_POLL_S, deadline - time.monotonic())
                if left <= 0:
                    raise ChannelTimeout(f"no answer within {timeout_s:g} s")
                readable, _, _ = select.select([self.wake], [], [], left)
                if readable:
                    try:
                        if not self.wake.recv(4096):
                            raise ChannelClosed("the other side closed the channel")
                    except (BlockingIOError, InterruptedError):
                        pass
        finally:
            region[flag] = 0


# --- replies: plain data only (the evaluator never unpickles what the agent's side wrote) ----------

_TUPLE, _DICT = "__air_tuple__", "__air_dict__"
MAX_DEPTH = 64


class NotPlainData(TypeError):
    """A value that cannot cross to the evaluator (only None, bool, int, float, str and containers)."""


def to_plain(value, depth: int = 0):
    """A JSON-able form of ``value`` that keeps tuples and non-string dict keys; numpy scalars and arrays
    become Python numbers and lists (the agent's side calls this)."""
    if depth > MAX_DEPTH:
        raise NotPlainData("value nested too deeply")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [to_plain(v, depth + 1) for v in value]
    if type(value) is tuple:
        return {_TUPLE: [to_plain(v, depth + 1) for v in value]}
    if type(value) is dict:
        return {_DICT: [[to_plain(k, depth + 1), to_plain(v, depth + 1)] for k, v in value.items()]}
    item = getattr(value, "item", None) if type(value).__module__ == "numpy" else None
    if item is not None and getattr(value, "ndim", 0) == 0:
        return to_plain(item(), depth + 1)
    tolist = getattr(value, "tolist", None) if type(value).__module__ == "numpy" else None
    if tolist is not None:
        return to_plain(tolist(), depth + 1)
    raise NotPlainData(f"a {type(value).__module__}.{type(value).__qualname__} cannot be returned to the evaluator")


def from_plain(value, depth: int = 0):
    """Undo ``to_plain`` on decoded JSON, refusing anything else (the evaluator calls this)."""
    if depth > MAX_DEPTH:
        raise NotPlainData("value nested too deeply")
    if value is None or type(value) in (bool, int, float, str):
        return value
    if type(value) is list:
        return [from_plain(v, depth + 1) for v in value]
    if type(value) is dict and len(value) == 1:
        if _TUPLE in value and type(value[_TUPLE]) is list:
            return tuple(from_plain(v, depth + 1) for v in value[_TUPLE])
        if _DICT in value and type(value[_DICT]) is list:
            pairs = value[_DICT]
            if all(type(p) is list and len(p) == 2 for p in pairs):
                result = {}
                for key, item in pairs:
                    key = from_plain(key, depth + 1)
                    try:
                        result[key] = from_plain(item, depth + 1)
                    except TypeError as exc:  # an unhashable key
                        raise NotPlainData(f"bad dict key: {exc}") from exc
                return result
    raise NotPlainData("malformed value from the agent's side")
