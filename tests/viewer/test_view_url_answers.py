"""`air view` prints its URL only once the server answers there: read the moment it appears, the URL is
opened at once (no retry) and the page comes back. Before, it was printed as Streamlit began to import,
seconds (about 10 on a loaded host) before anything listened on the port."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

from air.viewer.local_server import free_port
from rigs.synthetic_runs import write_synthetic_run

REPO = Path(__file__).resolve().parents[2]


def test_the_url_answers_the_moment_it_is_printed(tmp_path: Path) -> None:
    write_synthetic_run(tmp_path / "run", 16)
    port = free_port()
    command = [sys.executable, "-m", "air.run_training", "view", str(tmp_path / "run"), "--port", str(port)]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, cwd=REPO
    )
    # A backstop only, should the server hang before printing: it ends the read below, it decides nothing.
    backstop = threading.Timer(600, lambda: os.killpg(process.pid, signal.SIGKILL))
    backstop.start()
    seen: list[str] = []
    try:
        assert process.stdout is not None
        for line in process.stdout:
            seen.append(line.rstrip("\n"))
            if line.startswith("air view: open "):
                url = line.removeprefix("air view: open ").strip()
                # One request, at once: the server must already answer (no proxy: $http_proxy stays out of it).
                opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
                with opener.open(url, timeout=60) as reply:
                    status, page = reply.status, reply.read()
                seen.append(next(process.stdout).rstrip("\n"))
                break
        else:
            raise AssertionError("air view ended without printing its URL:\n" + "\n".join(seen))
    finally:
        backstop.cancel()
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        process.wait(timeout=600)  # a backstop (rigs/patience.py)
    assert url == f"http://127.0.0.1:{port}"
    assert status == 200 and b"<noscript>" in page, page[:300]  # Streamlit's page
    ours = [line for line in seen if line.startswith("air view: ") and "ready:" not in line]
    assert ours == [
        f"air view: starting the viewer on port {port} (its address follows once it answers)",
        f"air view: open http://127.0.0.1:{port}",
        f"air view: from another machine: ssh -L {port}:localhost:{port} HOST (HOST: this one), "
        f"then open http://localhost:{port}",
    ], seen
