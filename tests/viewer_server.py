"""Starts the viewer as a real Streamlit server on loopback, and finds a headless Chromium to open
it with (Debian's package). Used by the browser test and by benchmarks/viewer.py."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "air" / "visualize.py"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome")


def chromium_path() -> str | None:
    """$AIR_CHROMIUM, else the first Chromium on PATH."""
    explicit = os.environ.get("AIR_CHROMIUM")
    if explicit:
        return explicit if Path(explicit).is_file() else None
    return next((found for name in CHROMIUM_NAMES if (found := shutil.which(name))), None)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextlib.contextmanager
def viewer_server(
    trajectory_dir: Path, via: str = "air view", wait_warm: bool = False, timeout_s: float = 120.0
) -> Iterator[str]:
    """Serve the viewer on 127.0.0.1 and yield its URL: ``via="air view"`` runs ``air view DIR``,
    ``via="streamlit run"`` the plain ``streamlit run air/visualize.py -- --trajectory_dir DIR``.
    ``wait_warm`` (air view only) also waits for its warm-up's "ready" line.
    The server (a process group of its own) is stopped on exit, whatever happened."""
    port = free_port()
    if via == "air view":
        command = [sys.executable, "-m", "air.run_training", "view", str(trajectory_dir), "--port", str(port)]
    elif via == "streamlit run":
        command = [
            sys.executable, "-m", "streamlit", "run", str(APP),
            "--server.address", "127.0.0.1", "--server.port", str(port), "--server.headless", "true",
            "--browser.gatherUsageStats", "false", "--", "--trajectory_dir", str(trajectory_dir),
        ]  # fmt: skip
    else:
        raise ValueError(f"via must be 'air view' or 'streamlit run', not {via!r}")
    log = tempfile.TemporaryFile("a+")  # appends: our reads move the shared offset, its writes still go to the end
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, cwd=REPO)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout_s
        while True:
            if process.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"streamlit exited with {process.returncode}:\n{log.read()[-3000:]}")
            with contextlib.suppress(OSError):
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=1) as reply:
                    log.seek(0)
                    warm = "air view: " in log.read() or not wait_warm  # ready, or warm-up skipped
                    if reply.status == 200 and warm:
                        break
            if time.monotonic() > deadline:
                raise TimeoutError(f"streamlit did not answer on {url} within {timeout_s:.0f} s")
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
