"""The shell protocol without Docker: quoting round-trips through a real bash, markers are found
across any chunking, and output is capped with head and tail kept."""

from __future__ import annotations

import os
import subprocess

from hypothesis import given, settings
from hypothesis import strategies as st

from air.sandbox.protocol import (
    SHELL_ARGV,
    SHELL_ENV,
    Capture,
    FrameDecoder,
    ansi_c_quote,
    new_nonce,
    shell_setup,
    wrap_command,
)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=200))
def test_ansi_c_quote_round_trips_through_bash(text: str) -> None:
    out = subprocess.run(
        ["bash", "--norc", "-c", f"printf %s {ansi_c_quote(text)}"], capture_output=True, check=True
    ).stdout
    assert out == text.encode()


def _run_wrapped(commands: list[str]) -> list[Capture]:
    """Feed wrapped commands to a real interactive bash and split its output with Capture."""
    nonces = [new_nonce() for _ in commands]
    script = b"".join(wrap_command(c, n) for c, n in zip(commands, nonces, strict=True))
    proc = subprocess.run(
        SHELL_ARGV, input=shell_setup() + script, capture_output=True, env={**os.environ, **SHELL_ENV}
    )
    stream, captures = proc.stdout, []
    for nonce in nonces:
        capture = Capture(10_000, (nonce,))
        for i in range(0, len(stream), 7):  # awkward chunk size: markers split across chunks
            if capture.feed(stream[i : i + 7]):
                break
        assert capture.done, f"no marker for {nonce} in {stream!r}"
        stream = capture.rest + stream[i + 7 :]
        captures.append(capture)
    return captures


def test_state_errors_and_exit_codes_in_a_real_bash() -> None:
    caps = _run_wrapped(
        [
            "cd /tmp && export FOO=bar && f() { echo fn-$1; }",
            "pwd; echo $FOO; f x",
            "echo 'unterminated",  # syntax error: reported, shell survives
            "echo ${UNSET_VAR:?not set}",  # expansion error: a non-interactive shell would die here
            "set -e; false; echo after-set-e",
            "cat <<EOF\nheredoc line\nEOF",
            "read line; echo read=[$line]",  # stdin is /dev/null: cannot swallow the next command
            "exit 3",
            "(exit 7)",
        ]
    )
    assert caps[0].exit_code == 0 and caps[1].text() == "/tmp\nbar\nfn-x\n"
    assert caps[2].exit_code == 2 and "unexpected EOF" in caps[2].text()
    assert caps[3].exit_code != 0 and "not set" in caps[3].text()
    assert caps[4].text() == "after-set-e\n"
    assert caps[5].text() == "heredoc line\n"
    assert caps[6].text() == "read=[]\n"
    assert caps[7].exit_code == 1 and "exit is disabled" in caps[7].text()
    assert caps[8].exit_code == 7 and caps[8].cwd == "/tmp"


def test_forged_marker_without_nonce_is_output() -> None:
    capture = Capture(1000, ("a" * 16,))
    assert not capture.feed(b"\x1eAIRbbbbbbbbbbbbbbbb:0:/tmp\x1e\n")
    assert capture.feed(b"\x1eAIR" + b"a" * 16 + b":5:/w\x1e\n")
    assert capture.exit_code == 5 and "AIRbbbb" in capture.text()


def test_capture_keeps_head_and_tail_within_the_cap() -> None:
    nonce = new_nonce()
    capture = Capture(4096, (nonce,))
    body = b"".join(b"line %06d\n" % i for i in range(100_000))
    for i in range(0, len(body), 65536):
        capture.feed(body[i : i + 65536])
        assert len(capture._buf) + len(capture._head) <= 4096 + 65536 + 8192  # never the whole output
    capture.feed(f"\x1eAIR{nonce}:0:/\x1e\n".encode())
    text = capture.text()
    assert capture.truncated and capture.total == len(body)
    assert text.startswith("line 000000\n") and text.endswith("line 099999\n")
    assert "bytes of output omitted" in text and len(text) < 4096 + 100


def test_frame_decoder_reassembles_split_frames() -> None:
    frames = b"".join(bytes([1, 0, 0, 0]) + len(p).to_bytes(4, "big") + p for p in [b"hello ", b"", b"world"])
    decoder = FrameDecoder()
    out = b"".join(decoder.feed(frames[i : i + 3]) for i in range(0, len(frames), 3))
    assert out == b"hello world"
