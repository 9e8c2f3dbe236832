"""The evaluation's one signed frame (air/tasks/scripts/eval_frame.py): anything but exactly one frame made
with the evaluation's key is refused, whatever else a process could have written beside it."""

from __future__ import annotations

import secrets

import pytest

from air.tasks.scripts import eval_frame
from air.tasks.scripts.eval_frame import FrameError, decode, encode

KEY = secrets.token_bytes(32)
PAYLOAD = {"kind": "result", "rc": 0, "stdout": '{"Score": 1.5}', "stderr": "", "stdout_bytes": 14, "dropped": 0}


def test_one_frame_made_with_the_key_is_read_back():
    assert decode(KEY, encode(KEY, PAYLOAD)) == PAYLOAD


@pytest.mark.parametrize(
    "output, reason",
    [
        (b"", "no evaluation frame"),
        (b'{"Score": 99.0}\n', "no evaluation frame"),
        (b'{"Score": 99.0}\n' + encode(KEY, PAYLOAD), "no evaluation frame"),  # bytes written before it
        (encode(KEY, PAYLOAD) + b"\n", "beside the frame"),  # trailing bytes
        (encode(KEY, PAYLOAD) + encode(KEY, PAYLOAD), "beside the frame"),  # two frames
        (encode(KEY, PAYLOAD)[:-3], "beside the frame"),  # cut short
        (encode(secrets.token_bytes(32), PAYLOAD), "not signed"),  # another key
        (encode(KEY, PAYLOAD).replace(b"1.5", b"9.5"), "not signed"),  # a body changed after signing
        (b"AIR-EVAL-FRAME/1 x y\n{}", "length"),
        (b"AIR-EVAL-FRAME/1 99999999999 y\n{}", "length"),
    ],
    ids=lambda value: None if isinstance(value, str) else "output",  # the frames hold a random key: ids by index
)
def test_anything_else_is_refused(output, reason):
    with pytest.raises(FrameError, match=reason):
        decode(KEY, output)


def test_a_signed_body_that_is_not_an_object_is_refused():
    body = b"[1, 2]"
    framed = f"{eval_frame.MAGIC} {len(body)} {eval_frame.tag(KEY, body)}\n".encode() + body
    with pytest.raises(FrameError, match="not a JSON object"):
        decode(KEY, framed)
