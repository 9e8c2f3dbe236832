"""The viewer served on a free loopback port for a program that drives it in a browser (the browser test,
benchmarks/viewer.py, scripts/viewer_screenshot.py), and the headless Chromium to open it with. The
server runs in a process group of its own and is stopped on leaving, whatever happened."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

from air.viewer.launch import answers

CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


class ViewerServerError(RuntimeError):
    """The server exited or never answered: the first line says so, the rest is its output's tail."""


def chromium_path() -> str | None:
    """$AIR_CHROMIUM (None when it names no file), else the first Chromium on PATH."""
    explicit = os.environ.get("AIR_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def serving(
    command: Sequence[str],
    port: int,
    name: str,
    ready: Callable[[str], bool] | None = None,
    timeout_s: float = 120.0,
    cwd: Path | None = None,
) -> Iterator[str]:
    """Run ``command`` (a Streamlit server on 127.0.0.1:``port``, ``name`` in errors) and yield its URL once
    its health route answers and ``ready(output so far)`` holds (``air view`` prints "air view: ready"
    after its warm-up)."""
    log = tempfile.TemporaryFile("a+")  # appends: our reads move the shared offset, its writes still go to the end
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=cwd)

    def output() -> str:
        log.seek(0)
        return log.read()

    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                text = output()
                last = [line for line in text.splitlines() if line.strip()][-1:] or ["no output"]
                raise ViewerServerError(f"{name} exited with {process.returncode}: {last[0]}\n{text[-3000:]}")
            if answers(f"{url}/_stcore/health", timeout_s=1) and (ready is None or ready(output())):
                break
            if time.monotonic() > deadline:
                raise ViewerServerError(f"{name} did not answer on {url} within {timeout_s:.0f} s\n{output()[-3000:]}")
            time.sleep(0.1)
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        log.close()
