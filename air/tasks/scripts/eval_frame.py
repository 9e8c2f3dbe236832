"""The one frame an evaluation answers with (stdlib only: the runner writes it in the sandbox, the host reads it).

    AIR-EVAL-FRAME/1 <body length> <HMAC-SHA256 of the body, hex>\\n<body: ASCII JSON object>

The key is the host's, new for each evaluation, and reaches the runner (root) in its exec's environment:
no process of the agent ever holds it. So even a process that wrote on the runner's output could not make a
frame the host accepts. The host accepts exactly one well-formed frame and nothing else around it: a second
frame, a bad tag, a short body or trailing bytes are a failed evaluation (fail closed).
"""

from __future__ import annotations

import hashlib
import hmac
import json

MAGIC = "AIR-EVAL-FRAME/1"
KEY_VARIABLE = "AIR_EVAL_KEY"  # hex, in the runner's environment only
MAX_BODY = 8 * 1024 * 1024


class FrameError(ValueError):
    """The evaluation's output is not one authentic frame."""


def tag(key: bytes, body: bytes) -> str:
    return hmac.new(key, body, hashlib.sha256).hexdigest()


def encode(key: bytes, payload: dict) -> bytes:
    body = json.dumps(payload, separators=(",", ":"), ensure_ascii=True).encode("ascii")
    return f"{MAGIC} {len(body)} {tag(key, body)}\n".encode("ascii") + body


def decode(key: bytes, output: bytes) -> dict:
    """The payload of ``output`` if it is exactly one frame made with ``key``, else FrameError."""
    header, newline, body = output.partition(b"\n")
    parts = header.split(b" ")
    if not newline or len(parts) != 3 or parts[0] != MAGIC.encode():
        raise FrameError("no evaluation frame")
    length, mac = parts[1], parts[2]
    if not length.isdigit() or int(length) > MAX_BODY:
        raise FrameError("a malformed frame length")
    if len(body) != int(length):  # short: cut off; long: trailing bytes (a second frame among them)
        raise FrameError(f"{len(body) - int(length):+d} bytes beside the frame's body")
    if not hmac.compare_digest(mac, tag(key, body).encode("ascii")):
        raise FrameError("a frame not signed with this evaluation's key")
    try:
        payload = json.loads(body)
    except ValueError:
        raise FrameError("a frame whose body is not JSON") from None
    if not isinstance(payload, dict):
        raise FrameError("a frame whose body is not a JSON object")
    return payload
