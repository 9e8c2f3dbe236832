"""verifiers' env-server wire, as much of it as a relay must know, and CURVE on a ZMQ socket.

A client (a DEALER) sends ``[request_id, method, payload]``; a server's ROUTER answers ``[request_id, data]``
(verifiers a60a606, prime-rl 559b447's pin) or ``[request_id, kind, data]`` with ``kind`` ``delta`` (a piece of
a run still going) or ``reply`` (the end; verifiers 0.4). The gate and the spreader relay frames untouched,
so either generation passes through; they only need to know when a request is over and how to word a
failure of their own in the client's generation, which they learn from the server's first reply.
"""

from __future__ import annotations

import hmac
from enum import StrEnum

import msgpack
import zmq

# Methods of our own, never forwarded to an env server: a spreader asking a gate how its node is.
STATUS = b"air-status"
FORGET = b"air-forget"  # the runs a spreader gave up on while the node was lost: cancel them there
PING = b"air-ping"  # the relay asking its spreader (a child process) whether it still works
HEALTH = b"health"
RUN = b"run"
CANCEL = b"cancel"


class Wire(StrEnum):
    """How a server frames its replies."""

    TWO_FRAMES = "request_id, data (verifiers a60a606)"
    THREE_FRAMES = "request_id, kind, data (verifiers 0.4)"


def wire_of(reply: list[bytes]) -> Wire:
    """The generation of a reply to a plain request (health), from its frames after the request id."""
    return Wire.TWO_FRAMES if len(reply) == 1 else Wire.THREE_FRAMES


def is_final(reply: list) -> bool:
    """Whether these frames (bytes or zmq Frames, after the request id) end their request: everything but a
    0.4 ``delta``. Only the kind frame is read, never the data."""
    if len(reply) != 2:
        return True
    kind = reply[0]
    return (kind.bytes if isinstance(kind, zmq.Frame) else bytes(kind)) != b"delta"


def pack(body: dict) -> bytes:
    return msgpack.packb(body, use_bin_type=True)


def unpack(data: bytes) -> dict:
    body = msgpack.unpackb(data, raw=False)
    if not isinstance(body, dict):
        raise ValueError(f"expected a map, got {type(body).__name__}")
    return body


def reply(wire: Wire, body: dict) -> list[bytes]:
    """A final reply (after the request id) in ``wire``'s framing."""
    data = pack(body)
    return [data] if wire is Wire.TWO_FRAMES else [b"reply", data]


def failure(wire: Wire, error: str) -> list[bytes]:
    """What verifiers' client reads as a failed request: it raises ``error``, and prime-rl's orchestrator
    counts the episode failed, not trained on."""
    return reply(wire, {"success": False, "error": error})


def succeeded(data: bytes) -> bool:
    """A final reply's ``success``, read off the front of its map without decoding the episode behind it."""
    try:
        unpacker = msgpack.Unpacker(raw=False)
        unpacker.feed(data)
        for _ in range(unpacker.read_map_header()):
            key = unpacker.unpack()
            if key == "success":
                return bool(unpacker.unpack())
            unpacker.skip()
    except (ValueError, msgpack.UnpackException, msgpack.OutOfData):
        pass
    return False


def cancel_target(payload: bytes) -> bytes:
    """The run a ``cancel`` request names; empty when the payload says nothing usable."""
    try:
        return str(unpack(payload).get("request_id", "")).encode()
    except (ValueError, msgpack.UnpackException, TypeError):
        return b""


# CURVE: the gate is the server (its node's key pair), the spreader the client (the run's client key pair).
# A peer whose public key is not the run's client key fails the handshake: it never reaches the socket.


def curve_server(socket: zmq.Socket, public: bytes, secret: bytes) -> None:
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_server = True


def curve_client(socket: zmq.Socket, public: bytes, secret: bytes, server_public: bytes) -> None:
    socket.curve_secretkey = secret
    socket.curve_publickey = public
    socket.curve_serverkey = server_public


class OnlyKey:
    """A ZAP credentials provider that admits one CURVE public key (z85) and no other."""

    def __init__(self, allowed_z85: bytes) -> None:
        self.allowed = allowed_z85
        self.refused = 0

    def callback(self, domain: str, key: bytes) -> bool:  # pyzmq's authenticator passes the key z85-encoded
        ok = hmac.compare_digest(key, self.allowed)
        self.refused += not ok
        return ok
