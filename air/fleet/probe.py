"""One ``air-status`` question to a node's gate, from a fresh socket: with the run's client key, or with none."""

from __future__ import annotations

import asyncio

import zmq
import zmq.asyncio

from air.fleet import wire
from air.fleet.folder import KeyPair


async def ask_status(address: str, keys: tuple[KeyPair, bytes] | None, timeout_s: float = 2.0) -> dict | None:
    """The gate's answer, or None when none came within ``timeout_s`` (``keys``: the client pair and the node's
    public key; None asks as a peer without the key)."""
    ctx = zmq.asyncio.Context()
    socket = ctx.socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    if keys is not None:
        client, node_public = keys
        wire.curve_client(socket, client.public, client.secret, node_public)
    socket.connect(address)
    try:
        await socket.send_multipart([b"air-check", wire.STATUS, b""])
        if not await socket.poll(timeout_s * 1000):
            return None
        return wire.unpack((await socket.recv_multipart())[-1])
    except (zmq.ZMQError, ValueError):
        return None
    finally:
        socket.close(0)
        ctx.term()


def answers(address: str, keys: tuple[KeyPair, bytes], timeout_s: float = 2.0) -> bool:
    return asyncio.run(ask_status(address, keys, timeout_s)) is not None
