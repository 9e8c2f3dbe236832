"""`air view`'s port with a real listening socket in the way: an explicit --port in use is refused in one
line (no Streamlit start, no traceback); the default moves past a busy 8501 before Streamlit starts, and
the URL and ssh -L line it prints name the port the real server then answers on."""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from air.viewer.launch import DEFAULT_PORT, ViewerPortError, choose_port, port_free
from air.viewer.local_server import free_port
from rigs.patience import backstop

REPO = Path(__file__).resolve().parents[2]


@contextlib.contextmanager
def occupied(port: int) -> Iterator[socket.socket | None]:
    """A socket listening on 127.0.0.1:``port`` (None when something else already listens there)."""
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.1", port))
    except OSError:
        sock.close()
        assert not port_free("127.0.0.1", port)  # busy anyway: what the test needs
        yield None
        return
    sock.listen(1)
    try:
        yield sock
    finally:
        sock.close()


def _air_view(*args: str) -> list[str]:
    return [sys.executable, "-m", "air.run_training", "view", *args]


def test_an_explicit_port_in_use_is_refused_in_one_line_naming_it_and_the_fix(tmp_path: Path) -> None:
    port = free_port()
    with occupied(port):
        done = subprocess.run(
            _air_view(str(tmp_path), "--port", str(port)), capture_output=True, text=True, timeout=backstop(60)
        )
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 1, done.stderr
    assert lines == [
        f"air: error: port {port} on 127.0.0.1 is in use (another viewer, or another program): pass another --port, "
        f"or leave --port out to serve on the first free port from {DEFAULT_PORT}"
    ]
    assert "Traceback" not in done.stdout + done.stderr and "Uvicorn" not in done.stdout  # Streamlit never started


def test_the_port_is_chosen_by_a_real_bind_before_streamlit_starts() -> None:
    port = free_port()
    with occupied(port):
        assert not port_free("127.0.0.1", port)
        chosen = choose_port("127.0.0.1", None, first=port)
        assert chosen > port and port_free("127.0.0.1", chosen)
        with pytest.raises(ViewerPortError, match=f"port {port} on 127.0.0.1 is in use.*another --port"):
            choose_port("127.0.0.1", port)
    assert choose_port("127.0.0.1", port) == port  # free again: taken as asked
    assert choose_port("127.0.0.1", 0) > 0  # --port 0: a free port, known before the start
    with pytest.raises(ViewerPortError, match="cannot listen on 203.0.113.9"):  # an address not on this machine
        choose_port("203.0.113.9", None)


def test_the_default_port_moves_past_a_busy_one_and_the_printed_url_and_ssh_line_name_it(tmp_path: Path) -> None:
    with occupied(DEFAULT_PORT), tempfile.TemporaryFile("a+") as log:
        process = subprocess.Popen(
            _air_view(str(tmp_path)), stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO
        )
        try:
            deadline, text, answered = time.monotonic() + backstop(90), "", False
            while not answered and time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.2)
                log.seek(0)
                text = log.read()
                if match := re.search(r"air view: open http://127\.0\.0\.1:(\d+)\n", text):
                    port = int(match.group(1))
                    with contextlib.suppress(OSError):
                        with urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=1) as reply:
                            answered = reply.status == 200
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=backstop(30))
    assert answered, f"no printed port answered:\n{text[-3000:]}"
    assert port != DEFAULT_PORT
    assert f"air view: port {DEFAULT_PORT} is in use: serving on {port}\n" in text
    assert f"ssh -L {port}:localhost:{port} HOST" in text and f"then open http://localhost:{port}" in text
    assert "Traceback" not in text
