"""The call channel between the trusted evaluator and the agent's worker process (stdlib only: it runs
inside the sandbox, in both processes).

A game's evaluation calls the agent's function ~100,000 times, each answered in microseconds, so a
socket round trip per call (~40 us in Python) would multiply the evaluation's time. Requests and
replies go through a shared memory region instead. The waiting side spins (the evaluation runner puts
the two processes on different CPUs) and sleeps on a socket that the other side writes one byte to,
only when the sleeper's flag says it sleeps: after 200 us of nothing, at once with fewer than two
CPUs, and while the host is oversubscribed (see ``Channel._await`` and spin_policy).

Layout: two slots (request, reply), each [ready byte | pad | seq u64 | length u32 | pad | payload],
then one sleep flag and one pid per side. A message is published by its one-byte ready mark, written
after everything else (one byte cannot be seen half-written; x86-64 keeps stores in order). Either
side may scribble anything into the region: the evaluator reads only the reply slot and checks its
sequence number and length; the payload is decoded with plain-data decoders only.
"""

from __future__ import annotations

import mmap
import select
import socket
import struct
import time
from os import sched_yield as yield_cpu

from spin_policy import PeerWaits, spin_budget_s, write_pid

SLOT_HEADER = 24  # the payload follows at once: a short message and its header share one cache line
SLOT_CAPACITY = 8 * 1024 * 1024  # largest request or reply; larger ones are refused with a clear error
_HEADER = struct.Struct("=QI")  # native: each field one aligned store, never seen half-written
_pack_header, _unpack_header = _HEADER.pack_into, _HEADER.unpack_from
_HEADER_AT = 8  # [ready byte | pad | seq u64 | length u32]: the ready byte (seq % 256) is written last
REQUEST, REPLY = 0, 1
EVALUATOR_SLEEPS, WORKER_SLEEPS = 0, 1
SLOT_STRIDE = 64 + SLOT_CAPACITY  # each slot starts on its own cache line
_FLAGS_AT = 2 * SLOT_STRIDE
_PIDS_AT = _FLAGS_AT + 8  # each side's pid (u32, evaluator's then worker's): see spin_policy
REGION_SIZE = _FLAGS_AT + 64
SPIN_FIRST_S = 20e-6  # most answers come sooner; a longer spin yields its CPU now and then
PATIENCE_AFTER_WAKING = 10  # the peer slept: its answer needs a wake-up first, so spin 10x longer
CONTENDED = 0.1  # the peer waited for a CPU over a tenth of the time: spinning takes a CPU it wants
CONTENTION_WINDOW_NS = 40_000_000
BACKOFF_AFTER = 16  # failed spins in a row on a contended host, then sleep at once...
PROBE_EVERY = 64  # ...but spin again every 64th wait, to notice when the host is quiet again
SLEEP_POLL_S = 0.005  # a wake byte can be missed in a rare race; a sleeper re-checks this often


CALLABLE_MARK = {"__air_callable__": True}  # the worker's word for "a function" (never a to_plain value)


class ChannelClosed(Exception):
    """The other side is gone or broke the protocol."""


class ChannelTimeout(Exception):
    """No reply within the time limit."""


class Channel:
    """One side of the channel. ``side`` is ``"evaluator"`` (sends requests) or ``"worker"`` (replies)."""

    def __init__(self, side: str, region_fd: int, wake_fd: int) -> None:
        self.region = mmap.mmap(region_fd, REGION_SIZE)
        self.wake = socket.socket(fileno=wake_fd)
        self.wake.setblocking(False)
        evaluator = side == "evaluator"
        self._send_at = (REQUEST if evaluator else REPLY) * SLOT_STRIDE
        self._recv_at = (REPLY if evaluator else REQUEST) * SLOT_STRIDE
        self._my_flag = _FLAGS_AT + (EVALUATOR_SLEEPS if evaluator else WORKER_SLEEPS)
        self._peer_flag = _FLAGS_AT + (WORKER_SLEEPS if evaluator else EVALUATOR_SLEEPS)
        self.spin_s = spin_budget_s()
        self._failed_spins = self._waits_without_spin = 0  # adaptive spinning (see _await)
        write_pid(self.region, _PIDS_AT + (0 if evaluator else 4))
        self._peer_waits = PeerWaits(self.region, _PIDS_AT + (4 if evaluator else 0))
        self._peer_last: tuple[int, int] | None = None
        self._peer_window = (0.0, 0.0)  # (ns the peer waited, ns elapsed) lately

    # --- slots (hot path: kept to a few attribute look-ups per message) --------------------------

    def exchange(self, seq: int, payload: bytes, timeout_s: float) -> tuple[int, bytes]:
        """The evaluator's call: send request ``seq``, wait for the reply after it (``send`` and
        ``receive`` written out: a game makes ~100,000 of these and each call layer costs ~5%)."""
        size, region, at = len(payload), self.region, self._send_at
        if size > SLOT_CAPACITY:
            raise ValueError(f"message of {size} bytes exceeds the channel's {SLOT_CAPACITY} bytes")
        region[at + SLOT_HEADER : at + SLOT_HEADER + size] = payload
        _pack_header(region, at + _HEADER_AT, seq, size)
        region[at] = seq & 0xFF
        patience = 1
        if region[self._peer_flag]:
            patience = self._wake_peer()
        at, old, spins = self._recv_at, (seq - 1) & 0xFF, 0
        while region[at] == old:  # a short spin inline; the worker answers in about a microsecond
            spins += 1
            if spins > 64:
                self._await(at, old, timeout_s, patience)
                break
        got, size = _unpack_header(region, at + _HEADER_AT)
        if size > SLOT_CAPACITY:
            raise ChannelClosed(f"malformed message length {size}")
        return got, region[at + SLOT_HEADER : at + SLOT_HEADER + size]

    def _wake_peer(self) -> int:
        """Wake the sleeping peer; returns how much longer than usual to spin for its answer."""
        try:
            self.wake.send(b"w")
        except (BlockingIOError, InterruptedError):
            pass  # a byte is already waiting
        except OSError as exc:
            raise ChannelClosed(f"the other side is gone ({exc})") from exc
        return PATIENCE_AFTER_WAKING

    def serve(self, handle) -> None:
        """The worker's loop: each request's payload -> ``handle(payload)`` -> the reply, until closed."""
        region, rat, sat, peer_flag = self.region, self._recv_at, self._send_at, self._peer_flag
        seq, patience = 0, 1
        while True:
            old, spins = seq & 0xFF, 0
            while region[rat] == old:
                spins += 1
                if spins > 64:
                    self._await(rat, old, None, patience)
                    break
            seq, size = _unpack_header(region, rat + _HEADER_AT)
            if size > SLOT_CAPACITY:
                raise ChannelClosed(f"malformed message length {size}")
            reply = handle(region[rat + SLOT_HEADER : rat + SLOT_HEADER + size])
            size = len(reply)
            if size > SLOT_CAPACITY:
                raise ValueError(f"message of {size} bytes exceeds the channel's {SLOT_CAPACITY} bytes")
            region[sat + SLOT_HEADER : sat + SLOT_HEADER + size] = reply
            _pack_header(region, sat + _HEADER_AT, seq, size)
            region[sat] = seq & 0xFF
            patience = self._wake_peer() if region[peer_flag] else 1

    def _await(self, at: int, old: int, timeout_s: float | None, patience: int = 1) -> None:
        """Wait until the ready byte at ``at`` changes: spin while spinning pays, else sleep.

        Spinning pays unless the host is oversubscribed (see spin_policy). Each spin that finds nothing
        asks whether the peer has lately been waiting for a CPU (``_peer_contended``): 16 such spins in
        a row, and waits sleep at once, except every 64th, which spins again to notice a quieter host.
        A failed spin while the peer ran (busy with its own work) or a spin that finds the message
        resets the count: sleeping there would cost each of the next calls a wake-up. When we just woke
        the peer, its answer needs that wake-up first: spin ``patience`` times longer, or both sides
        would keep missing each other and sleeping."""
        spin_s = self.spin_s * patience
        if spin_s and (self._failed_spins < BACKOFF_AFTER or self._probe()):
            region, clock = self.region, time.perf_counter
            start = clock()
            while True:
                for _ in range(64):  # check the clock only now and then
                    if region[at] != old:
                        self._failed_spins = 0
                        return
                now = clock()
                if now - start > spin_s:
                    break
                if now - start > SPIN_FIRST_S:
                    yield_cpu()  # a peer just woken may have been queued on our CPU: let it run
            self._failed_spins = self._failed_spins + 1 if self._peer_contended() else 0
        self._sleep(old, timeout_s)

    def _peer_contended(self) -> bool:
        """Whether the peer spent over a tenth of the last few tens of milliseconds waiting for a CPU.
        The kernel adds a wait to its count only when the waiter gets to run, in steps of milliseconds,
        so a look across one 200 us spin would mostly see nothing: the share is taken over a window
        that halves once it spans CONTENTION_WINDOW_NS. Unknown (no /proc access) counts as contended."""
        waited, now = self._peer_waits(), time.monotonic_ns()
        if waited is None:
            return True
        last, self._peer_last = self._peer_last, (waited, now)
        if last is None or not (waited and last[0]):
            return False  # a first look, or the peer has not started yet
        window_waited, window = self._peer_window
        window_waited, window = window_waited + waited - last[0], window + now - last[1]
        if window > CONTENTION_WINDOW_NS:
            window_waited, window = window_waited / 2, window / 2
        self._peer_window = window_waited, window
        return window_waited > CONTENDED * window

    def _probe(self) -> bool:
        self._waits_without_spin += 1
        return self._waits_without_spin % PROBE_EVERY == 0

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
