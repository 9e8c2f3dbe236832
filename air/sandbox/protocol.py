"""The byte-level protocol of the persistent shell, free of any I/O (so it is tested without Docker).

A command travels as one line: ``eval $'...' </dev/null && rc=0 || rc=$?`` followed by a
``printf`` of an end marker that carries a per-command nonce, the exit code and the shell's cwd.
The shell is an *interactive* bash without a terminal (``-i``, no readline, no history): unlike a
non-interactive one it survives syntax and expansion errors (``${x:?}``), and SIGINT abandons the
current line (breaking a builtin ``while true``) instead of killing it.

- ``eval`` of an ANSI-C quoted string runs in the shell itself, so ``cd``, ``export`` and
  functions persist; a syntax error is reported by ``eval`` and never leaves bash waiting for
  more input (no ``bash -n`` round trip as MLGym does).
- stdin is ``/dev/null``: a command that reads stdin cannot swallow the marker line.
- ``&& rc=0 || rc=$?`` keeps the exit code and means an agent's ``set -e`` cannot kill the shell.
- The nonce makes the marker unforgeable by command output.
"""

from __future__ import annotations

import re
import secrets
from dataclasses import dataclass

# Docker multiplexes an exec's stdout/stderr (no TTY) in frames: 1 byte stream, 3 zero bytes,
# 4 bytes big-endian payload length, payload.
_FRAME_HEADER = 8

_QUOTE_TABLE = [
    "\\\\" if b == 0x5C else "\\'" if b == 0x27 else chr(b) if 0x20 <= b < 0x7F else f"\\x{b:02x}" for b in range(256)
]


def ansi_c_quote(text: str) -> str:
    """Quote ``text`` as a bash ``$'...'`` word that round-trips every byte but NUL."""
    data = text.encode("utf-8", "surrogateescape").replace(b"\x00", b"")
    return "$'" + "".join(_QUOTE_TABLE[b] for b in data) + "'"


def shell_argv(max_file_bytes: int = 0, name: str = "bash") -> list[str]:
    """The exec that starts the shell, its argv[0] ``name`` (how root finds it: ``root_side``);
    ``max_file_bytes`` caps every file it and its children write (RLIMIT_FSIZE,
    in bash's 1024-byte blocks; 0: none). ``ulimit -f`` sets the hard limit with the soft one, so the agent cannot
    raise it again; where it fails, the engine already set a lower hard limit, which then holds."""
    limit = f"ulimit -f {-(-max_file_bytes // 1024)} 2>/dev/null; " if max_file_bytes else ""
    # The agent's processes (they inherit it) weigh 1% of memory more to the OOM killer: chosen before root's tiny
    # keep-alive (a container whose memory is full lost it, stopped, and the pool took it for a host failure), still
    # after a larger evaluation, as by their size alone.
    first_to_go = "echo 10 >/proc/self/oom_score_adj 2>/dev/null; "
    # stderr joins stdout before bash starts, so its start-up chatter ("no job control in this shell")
    # arrives in order, ahead of the first marker, instead of on Docker's separately-ordered stream.
    interactive = f"exec -a {name} bash --noprofile --norc --noediting +m -i 2>&1"
    return ["bash", "-c", f"{limit}{first_to_go}PS1= PS2= {interactive}"]


SHELL_ARGV = shell_argv()

SHELL_ENV = {"PS1": "", "PS2": "", "PROMPT_COMMAND": ""}


def shell_setup(path_prepend: str | None = None, cwd: str | None = None, workdir: str | None = None) -> bytes:
    """The first line a new shell reads: merge stderr, quiet the interactive extras, guard exit, go to ``cwd``.

    The shell's exec starts in ``/`` (always there) and goes to ``cwd`` from here: a folder the agent renamed,
    removed or made unreadable (its own home or ``workdir`` included) never keeps a new shell from starting.
    ``workdir`` (and the home) are made there and usable again first, by the agent's own rights (it owns them);
    where ``cwd`` cannot be entered, ``workdir`` is, else the home, else ``/``. A shell that starts is never a
    masked rollout."""
    parts = [
        "exec 2>&1",
        "set +H +o history",
        "unset MAILCHECK PROMPT_COMMAND",
        # `exit` in the agent's shell would end the session; say so instead (scripts may still exit).
        # (Only in the shell itself: in a subshell, `(exit 7)` keeps its meaning.)
        "__air_shell=$BASHPID",
        'exit() { if [ "$BASHPID" = "$__air_shell" ]; then echo \'exit is disabled in this shell'
        ' (use submit to finish)\'; return 1; fi; builtin exit "$@"; }',
        "logout() { exit; }",
    ]
    if path_prepend:
        parts.append(f"[ -d {path_prepend} ] && export PATH={path_prepend}:$PATH")
    if cwd:
        work, quiet = ansi_c_quote(workdir or cwd), "2>/dev/null"
        parts.append(f"{{ chmod u+rwx ~ {quiet}; mkdir -p {work} {quiet}; chmod u+rwx {work} {quiet}; }}")
        parts.append(f"{{ cd {ansi_c_quote(cwd)} {quiet} || cd {work} {quiet} || cd ~ {quiet} || cd /; }}")
    return ("; ".join(parts) + "\n").encode()


def new_nonce() -> str:
    return secrets.token_hex(8)


def _marker_printf(nonce: str, exit_code: str) -> str:
    """The shell code that prints a command's end marker (what ``marker_regex`` matches)."""
    return f"printf '\\036AIR{nonce}:%d:%s\\036\\n' {exit_code} \"$PWD\""


def wrap_command(command: str, nonce: str) -> bytes:
    """The bytes written to the shell's stdin for one command (always a single line)."""
    run = f"eval {ansi_c_quote(command)} </dev/null && __air_rc=0 || __air_rc=$?"
    marker = _marker_printf(nonce, '"$__air_rc"')
    return f"{run}; {marker}\n".encode()


def recovery_line(nonce: str) -> bytes:
    """Sent after an interrupt: an interactive bash drops the interrupted line, marker included."""
    return f"{_marker_printf(nonce, '130')}\n".encode()


def marker_regex(*nonces: str) -> re.Pattern[bytes]:
    alternatives = b"|".join(re.escape(n.encode()) for n in nonces)
    return re.compile(rb"\x1eAIR(" + alternatives + rb"):(-?\d+):([^\x1e]*)\x1e\n")


# An interactive bash without a terminal complains when a job dies of a signal; not the agent's output.
_TTY_NOISE = re.compile(  # bash names itself by its argv[0]: the shell's is ``air-shell-<hex>``
    rb"(?:bash|air-shell-[0-9a-f]+): \[\d+: \d+ \(\d+\)\] tcsetattr: Inappropriate ioctl for device\n"
)

# Longest marker we must be able to see across a chunk boundary (cwd up to 4 KiB).
MARKER_WINDOW = 4096 + 64


class FrameDecoder:
    """Incremental decoder of Docker's multiplexed stream; yields payload bytes."""

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> bytes:
        self._buf += data
        out = bytearray()
        while len(self._buf) >= _FRAME_HEADER:
            size = int.from_bytes(self._buf[4:8], "big")
            if len(self._buf) < _FRAME_HEADER + size:
                break
            out += self._buf[_FRAME_HEADER : _FRAME_HEADER + size]
            del self._buf[: _FRAME_HEADER + size]
        return bytes(out)


@dataclass
class Capture:
    """Collects one command's output with a hard memory bound, keeping head and tail."""

    max_bytes: int
    nonces: tuple[str, ...]

    def __post_init__(self) -> None:
        self._pattern = marker_regex(*self.nonces)
        self.matched: str | None = None  # which nonce's marker ended the capture
        self.rest = b""  # bytes that arrived after the marker
        self._head = bytearray()
        self._buf = bytearray()  # recent bytes: the tail plus room to see the marker
        self.total = 0  # bytes of output seen (marker excluded once found)
        self.omitted = 0
        self.exit_code: int | None = None
        self.cwd: str | None = None
        self.done = False

    @property
    def _head_cap(self) -> int:
        return self.max_bytes // 2

    @property
    def _tail_cap(self) -> int:
        return self.max_bytes - self._head_cap

    def add_nonce(self, nonce: str) -> None:
        """Also accept ``nonce``'s marker as the end (the recovery marker after an interrupt)."""
        self.nonces = (*self.nonces, nonce)
        self._pattern = marker_regex(*self.nonces)

    def feed(self, data: bytes) -> bool:
        """Add output; return True once the end marker has arrived."""
        if self.done or not data:
            return self.done
        scan_from = max(0, len(self._buf) - MARKER_WINDOW)
        if b"tcsetattr" in data:
            data = _TTY_NOISE.sub(b"", data)
        self._buf += data
        self.total += len(data)
        match = self._pattern.search(self._buf, scan_from)
        if match:
            self.matched = match.group(1).decode()
            self.exit_code = int(match.group(2))
            self.cwd = match.group(3).decode("utf-8", "replace")
            self.rest = bytes(self._buf[match.end() :])
            self.total -= len(self._buf) - match.start()
            del self._buf[match.start() :]  # the marker and anything a background job printed after it
            self.done = True
        self._shrink(keep_window=not self.done)
        return self.done

    def _shrink(self, keep_window: bool) -> None:
        room = self._head_cap - len(self._head)
        if room > 0 and len(self._buf) > self._tail_cap + (MARKER_WINDOW if keep_window else 0):
            take = min(room, len(self._buf) - self._tail_cap)
            self._head += self._buf[:take]
            del self._buf[:take]
        limit = self._tail_cap + (MARKER_WINDOW if keep_window else 0)
        if len(self._head) >= self._head_cap and len(self._buf) > limit:
            drop = len(self._buf) - limit
            self.omitted += drop
            del self._buf[:drop]

    @property
    def truncated(self) -> bool:
        return self.omitted > 0

    def text(self) -> str:
        if not self.omitted:
            return (bytes(self._head) + bytes(self._buf)).decode("utf-8", "replace")
        tail = bytes(self._buf[-self._tail_cap :]) if self._tail_cap else b""
        omitted = self.total - len(self._head) - len(tail)
        note = f"\n[... {omitted} bytes of output omitted ...]\n".encode()
        return (bytes(self._head) + note + tail).decode("utf-8", "replace")
