"""A stand-in env server speaking verifiers' env-server wire, for the fleet's tests and benchmarks: no
Docker, no model. ``python -m rigs.stub_env_server ENV_JSON ADDRESS CAPACITY`` (the arguments
air.env.v1_serve takes). An episode's ``task_data`` says how long it lasts (``seconds``); the reply names
the server (``STUB_NAME``) and echoes the task. ``STUB_WIRE`` picks the framing: ``two`` (verifiers
a60a606) or ``three`` (0.4: a ``delta`` frame, then the ``reply``)."""

from __future__ import annotations

import asyncio
import os
import sys
import time

import msgpack
import zmq
import zmq.asyncio


def pack(body: dict) -> bytes:
    return msgpack.packb(body, use_bin_type=True)


async def serve(address: str, capacity: int) -> None:
    three = os.environ.get("STUB_WIRE", "three") == "three"
    name = os.environ.get("STUB_NAME", "stub")
    ctx = zmq.asyncio.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.bind(address)
    gate = asyncio.Semaphore(capacity)
    running: dict[bytes, asyncio.Task] = {}

    async def send(client: bytes, request_id: bytes, body: dict) -> None:
        frames = [b"reply", pack(body)] if three else [pack(body)]
        await sock.send_multipart([client, request_id, *frames])

    async def run(client: bytes, request_id: bytes, payload: bytes) -> None:
        request = msgpack.unpackb(payload, raw=False)
        task = request.get("task_data", {})
        print(f"run {request_id.decode()}", file=sys.stderr, flush=True)
        started = None
        try:
            async with gate:
                started = time.time()
                if three:
                    await sock.send_multipart([client, request_id, b"delta", pack({"server": name})])
                await asyncio.sleep(float(task.get("seconds", 0.0)))
            episode = {"server": name, "task": task, "pid": os.getpid(), "started": started, "ended": time.time()}
            body = {"success": True, "error": None, "episode": episode}
        except asyncio.CancelledError:
            body = {"success": False, "error": "Cancelled: rollout aborted"}
        finally:
            running.pop(request_id, None)
        await send(client, request_id, body)

    while True:
        client, request_id, method, payload = await sock.recv_multipart()
        if method == b"health":
            await send(client, request_id, {"success": True, "error": None})
        elif method == b"run":
            running[request_id] = asyncio.create_task(run(client, request_id, payload))
        elif method == b"cancel":
            target = str(msgpack.unpackb(payload, raw=False).get("request_id", "")).encode()
            task = running.get(target)
            print(f"cancel {target.decode()} {'running' if task else 'unknown'}", file=sys.stderr, flush=True)
            if task is not None:
                task.cancel()
            await send(client, request_id, {"success": True, "error": None, "cancelled": task is not None})


def main(argv: list[str]) -> int:
    _env_json, address, capacity = argv
    try:
        asyncio.run(serve(address, int(capacity)))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
