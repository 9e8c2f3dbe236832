"""Starts the viewer as a real Streamlit server on loopback (``air.viewer.local_server``), as `air view`
or as a plain `streamlit run`; its Chromium is Debian's package. Used by the browser test and by
benchmarks/viewer.py."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path

from air.viewer.local_server import chromium_path, free_port, serving
from rigs.patience import backstop

__all__ = ["chromium_path", "free_port", "viewer_server"]

REPO = Path(__file__).resolve().parent.parent
APP = REPO / "air" / "visualize.py"


@contextlib.contextmanager
def viewer_server(
    trajectory_dir: Path, via: str = "air view", wait_warm: bool = False, timeout_s: float | None = None
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
    # The warm-up ends with "ready: ..." or "warm-up skipped" (other "air view:" lines come before it).
    ready = (lambda output: "air view: ready" in output or "warm-up skipped" in output) if wait_warm else None
    bound = backstop(120) if timeout_s is None else timeout_s
    with serving(command, port, via, ready=ready, timeout_s=bound, cwd=REPO) as url:
        yield url
