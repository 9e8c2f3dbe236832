"""The evaluator's stand-in for the agent's modules (stdlib only; runs in the trusted evaluator process).

During evaluation of a Python-entrypoint task, each of the agent's top-level modules (strategy.py, ...)
is replaced, in the evaluator's private copy of the task, by a two-line file that calls ``bind``. The
evaluator imports it by name (MLGym's games: ``from strategy import row_strategy``) or by path (ours),
and gets a module whose functions forward each call to the agent's worker process. Only plain data
comes back; an exception, a crash, a hang or garbage on the agent's side raises ``AgentCodeError``
here, which the evaluation reports as the agent's failure.

When the evaluator seeds ``random`` or ``numpy.random``, the seed travels with the next call, so a
strategy that draws random numbers sees the same draws as it would in-process.
"""

from __future__ import annotations

import json
import marshal
import os
import pickle
import sys
from pathlib import Path

from call_channel import CALLABLE_MARK, Channel, ChannelClosed, ChannelTimeout, NotPlainData, from_plain

CALL_TIMEOUT_S = float(os.environ.get("AIR_AGENT_CALL_TIMEOUT_S", "30"))


class AgentCodeError(RuntimeError):
    """The agent's code failed, hung, died or answered with something that is not plain data."""


class _Connection:
    def __init__(self, region_fd: int, wake_fd: int) -> None:
        self.channel = Channel("evaluator", region_fd, wake_fd)
        self.seq = 0
        self.broken: str | None = None
        self.seeds: dict = {}

    def call(self, fid: int, module: str, name: str, args: tuple, kwargs: dict):
        """A call in full (names, keyword arguments, pending seeds); afterwards the worker knows ``fid``
        and remote_function's hot path sends the short form ``b"C" fid args`` when it can."""
        return self.request("call", module, name, args, kwargs, fid)

    def _exchange(self, payload: bytes, op: str, module: str, name: str):
        if self.broken:
            raise AgentCodeError(self.broken)
        self.seq = seq = self.seq + 1
        try:
            got, reply = self.channel.exchange(seq, payload, CALL_TIMEOUT_S)
        except Exception:
            return self.failed(module, name)
        return self.check(got, seq, reply, op, module, name)

    def failed(self, module: str, name: str):
        """The exchange raised (called from inside its ``except``): the channel is broken for good."""
        exc = sys.exc_info()[1]
        if isinstance(exc, ChannelTimeout):
            self.broken = f"{module}.{name or 'import'} did not return within {CALL_TIMEOUT_S:g} s (per-call limit)"
        elif isinstance(exc, (ChannelClosed, ValueError)):
            self.broken = f"the process running the agent's code died or broke the protocol ({exc})"
        else:
            raise exc
        raise AgentCodeError(self.broken) from None

    def check(self, got: int, seq: int, reply: bytes, op: str, module: str, name: str):
        if got != seq:
            self.broken = f"the agent's side broke the protocol (reply numbered {got}, expected {seq})"
            raise AgentCodeError(self.broken)
        if op == "call" and reply[:1] == b"i" and len(reply) <= 64:  # the worker's short form of an int
            try:
                return int(reply[1:])
            except ValueError:
                pass
        return self._decode_reply(reply, op, module, name)

    def request(self, op: str, module: str, name: str = "", args: tuple = (), kwargs: dict | None = None, fid=None):
        seeds, self.seeds = self.seeds, {}
        payload = _encode((op, module, name, args, kwargs, seeds, fid))
        return self._exchange(payload, op, module, name)

    def _decode_reply(self, reply: bytes, op: str, module: str, name: str):
        try:
            status, *rest = json.loads(reply)
            if status == "ok" and len(rest) == 1:
                if op == "import":
                    if type(rest[0]) is not dict:
                        raise TypeError("module names")
                    return {key: _decode(value) for key, value in rest[0].items()}
                return _decode(rest[0]) if op == "getattr" else from_plain(rest[0])
            if status == "err" and len(rest) == 2 and all(type(x) is str for x in rest):
                kind, message = rest
                raise AgentCodeError(f"{module}.{name or ''} failed ({kind}) in the agent's code:\n{message}")
        except (ValueError, NotPlainData, TypeError, RecursionError) as exc:
            self.broken = f"garbage from the agent's side ({type(exc).__name__})"
            raise AgentCodeError(self.broken) from None
        self.broken = "malformed reply from the agent's side"
        raise AgentCodeError(self.broken)


def _encode(message: tuple) -> bytes:
    """The evaluator's request: marshal (twice as fast as pickle for the plain data games pass), else
    pickle. Only the agent's side decodes it, so neither needs to be safe against forged input."""
    try:
        return b"m" + marshal.dumps(message)
    except ValueError:
        pass
    try:
        return b"p" + pickle.dumps(message, protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as exc:
        raise AgentCodeError(f"the evaluator's arguments to {message[1]}.{message[2]} cannot be sent: {exc}") from exc


_CALLABLE = object()


def _decode(value):
    return _CALLABLE if value == CALLABLE_MARK else from_plain(value)


_connection: _Connection | None = None


def _connect() -> _Connection:
    global _connection
    if _connection is None:
        fds = os.environ.get("AIR_AGENT_CHANNEL", "")
        if not fds:
            raise AgentCodeError("no agent worker for this evaluation")
        region_fd, wake_fd = (int(x) for x in fds.split(","))
        _connection = _Connection(region_fd, wake_fd)
        _patch_seeding(_connection)
    return _connection


def _patch_seeding(connection: _Connection) -> None:
    """Seeds the evaluator sets on its global generators are forwarded with the next call."""
    import random

    original = random.seed

    def seed(a=None, version=2):
        original(a, version)
        connection.seeds["random"] = a

    random.seed = seed
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        original_np = numpy.random.seed

        def np_seed(value=None):
            original_np(value)
            connection.seeds["numpy"] = value

        numpy.random.seed = np_seed


_function_ids = iter(range(1 << 32))


def remote_function(connection: _Connection, module: str, name: str):
    """A function of the agent's, called in the agent's process. A plain closure, not an object with
    ``__call__``: a game calls it ~100,000 times and every layer on this path costs a few percent."""
    fid = next(_function_ids)
    prefix = b"C" + fid.to_bytes(4, "little")
    exchange, dumps, timeout_s = connection.channel.exchange, marshal.dumps, CALL_TIMEOUT_S
    known = False  # the worker knows ``fid`` once a full call has named it

    def call(*args, **kwargs):
        nonlocal known
        if kwargs or not known or connection.seeds or connection.broken:
            result = connection.call(fid, module, name, args, kwargs)
            known = True
            return result
        try:
            payload = prefix + dumps(args)
        except ValueError:  # not marshal-able: the full call pickles
            return connection.call(fid, module, name, args, kwargs)
        connection.seq = seq = connection.seq + 1
        try:
            got, reply = exchange(seq, payload, timeout_s)
        except Exception:
            return connection.failed(module, name)
        if got == seq and reply[:1] == b"i" and len(reply) <= 64:  # the worker's short form of an int
            try:
                return int(reply[1:])
            except ValueError:
                pass
        return connection.check(got, seq, reply, "call", module, name)

    call.__name__ = call.__qualname__ = name
    call.__module__ = module
    return call


def _return_lengths() -> dict[str, int]:
    """``AIR_RETURN_LENGTHS`` ("strategy.row_strategy=6,..."), set by eval_runner from the task."""
    pairs = (item.partition("=") for item in os.environ.get("AIR_RETURN_LENGTHS", "").split(",") if item)
    return {name: int(length) for name, _, length in pairs if length.isdigit()}


def length_checked(function, where: str, expected: int):
    """``function``, refusing a result that does not hold ``expected`` values (blotto: an allocation of
    one battlefield would win every comparison zip() makes): the evaluation fails, never scores."""

    def call(*args, **kwargs):
        result = function(*args, **kwargs)
        try:
            size = len(result)
        except TypeError:
            size = None
        if size != expected:
            got = f"{size} values" if size is not None else f"a {type(result).__name__}"
            raise AgentCodeError(f"{where} returned {got}; the task expects {expected}")
        return result

    call.__name__ = call.__qualname__ = function.__name__
    call.__module__ = function.__module__
    return call


def _function(connection: _Connection, module: str, name: str, lengths: dict[str, int]):
    function = remote_function(connection, module, name)
    where = f"{module}.{name}"
    return length_checked(function, where, lengths[where]) if where in lengths else function


def bind(namespace: dict) -> None:
    """Fill a proxy module's namespace with the agent module's names (the agent's import runs now)."""
    name = Path(namespace["__file__"]).stem
    connection = _connect()
    try:
        names = connection.request("import", name)
    except AgentCodeError as exc:
        raise ImportError(f"importing the agent's {name}.py failed: {exc}", name=name) from None
    lengths = _return_lengths()
    for attr, value in names.items():
        if type(attr) is str and not attr.startswith("__"):
            namespace[attr] = _function(connection, name, attr, lengths) if value is _CALLABLE else value

    def __getattr__(attr: str):  # names the agent's module gains later, or private ones
        if attr.startswith("__"):
            raise AttributeError(attr)
        try:
            value = connection.request("getattr", name, attr)
        except AgentCodeError as exc:
            raise AttributeError(f"module {name!r} has no attribute {attr!r} ({exc})") from None
        return _function(connection, name, attr, lengths) if value is _CALLABLE else value

    namespace["__getattr__"] = __getattr__


PROXY_SOURCE = "from air_agent_proxy import bind\nbind(globals())\n"
