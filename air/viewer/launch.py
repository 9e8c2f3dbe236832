"""The viewer's server (``air view DIR``), warmed up before the first browser arrives.

It is ``streamlit run air/visualize.py -- --trajectory_dir DIR`` run in this process (through
Streamlit's own command line, so every ``--server.*`` option behaves as documented), plus a
background thread that imports the viewer's libraries and indexes DIR while the server starts:
the first page then only renders (measured in experiments.md).

The port is chosen here, before Streamlit starts, by the bind Streamlit makes: an explicit one that is
busy is refused with what to do; without one, the first free port from 8501 is handed to Streamlit as
explicit, so the URL and the ``ssh -L`` line printed name the port it listens on.
"""

from __future__ import annotations

import errno
import socket
import sys
import threading
import time
import urllib.request
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "visualize.py"  # the Streamlit script
INSTALL_HINT = "pip install 'air-mlgym[viewer]' (this project's own environment has it: `uv run air view DIR`)"
DEFAULT_PORT = 8501  # Streamlit's own
PORT_SEARCH = 100  # ports tried after the default, as Streamlit's own search
WILDCARDS = ("0.0.0.0", "::")
LOOPBACKS = ("127.0.0.1", "localhost", "::1", *WILDCARDS)  # forwarded as ssh's localhost


class ViewerPortError(Exception):
    """No port to listen on: the one asked for is busy, none is free from the default, or the address is bad."""


def port_free(host: str, port: int) -> bool:
    """Whether Streamlit could listen on ``host:port``: its own bind (the address's family, SO_REUSEADDR),
    tried and undone. ViewerPortError for an address this machine cannot listen on at all."""
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
            sock.listen(1)
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise ViewerPortError(f"cannot listen on {host} ({exc.strerror or exc}): pass another --host") from None
    return True


def choose_port(host: str, port: int | None, first: int = DEFAULT_PORT) -> int:
    """The port to serve on: ``port`` when it is free (ViewerPortError naming it and the fix when busy),
    else the first free one from ``first``."""
    if port == 0:  # any free port, as the system picks it (Streamlit would read it back too late to print)
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.bind((host, 0))
            return sock.getsockname()[1]
    if port is not None:
        if not port_free(host, port):
            raise ViewerPortError(
                f"port {port} on {host} is in use (another viewer, or another program): pass another --port, "
                f"or leave --port out to serve on the first free port from {DEFAULT_PORT}"
            )
        return port
    for candidate in range(first, first + PORT_SEARCH + 1):
        if port_free(host, candidate):
            return candidate
    raise ViewerPortError(f"ports {first}-{first + PORT_SEARCH} on {host} are all in use: pass a free --port")


def starting_lines(port: int, asked: int | None) -> list[str]:
    """What ``air view`` prints as Streamlit starts (seconds before it answers): the port, and why that one."""
    moved = asked is None and port != DEFAULT_PORT
    lines = [f"air view: port {DEFAULT_PORT} is in use: serving on {port}"] if moved else []
    return [*lines, f"air view: starting the viewer on port {port} (its address follows once it answers)"]


def address_lines(host: str, port: int) -> list[str]:
    """What ``air view`` prints once the server answers: the URL, and the ssh -L for a remote machine."""
    shown = _shown(host)
    lines = [f"air view: open http://{shown}:{port}"]
    target = "localhost" if host in LOOPBACKS else shown
    lines.append(
        f"air view: from another machine: ssh -L {port}:{target}:{port} HOST (HOST: this one), "
        f"then open http://localhost:{port}"
    )
    return lines


def _shown(host: str) -> str:
    return "127.0.0.1" if host in WILDCARDS else (f"[{host}]" if ":" in host else host)


def answers(url: str, timeout_s: float = 5.0) -> bool:
    """Whether ``url`` answers 200 now. Never through a proxy: $http_proxy must not decide what is local."""
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(url, timeout=timeout_s) as reply:
            return reply.status == 200
    except (OSError, ValueError):  # refused, reset, timed out, an HTTP error (URLError, HTTPError: OSError)
        return False


def announce_when_answering(host: str, port: int, lines: list[str], stopped: threading.Event) -> None:
    """Print ``lines`` once the viewer's page and its health route both answer, so the printed URL works
    the moment it is read (Streamlit takes seconds, more on a loaded host, to import and bind). Nothing is
    printed when ``stopped`` is set first (the server exited)."""
    local = "[::1]" if host == "::" else _shown(host)
    page, health = f"http://{local}:{port}/", f"http://{local}:{port}/_stcore/health"
    while not stopped.is_set():
        if answers(health) and answers(page):
            for line in lines:
                print(line, flush=True)
            return
        stopped.wait(0.2)


def streamlit_arguments(directory: Path, host: str, port: int | None, browser: bool) -> list[str]:
    options = ["--server.address", host, "--server.headless", "false" if browser else "true"]
    options += ["--server.port", str(port)] if port is not None else []
    options += ["--browser.gatherUsageStats", "false", "--client.toolbarMode", "viewer"]
    return ["run", str(APP), *options, "--", "--trajectory_dir", str(directory)]


def serve(directory: Path, host: str = "127.0.0.1", port: int | None = None, browser: bool = False) -> int:
    """Streamlit's server on ``host:port`` until it stops; its exit status. ``port`` None: Streamlit's own
    search (``air view`` always gives one, :func:`choose_port`)."""
    from streamlit.web import cli

    try:
        cli.main(args=streamlit_arguments(directory, host, port, browser), prog_name="streamlit")
    except SystemExit as exc:  # click ends with sys.exit; turn it into our return code
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return 0


def warm_up(directory: Path) -> None:
    """Import what the page needs and index the folder; a failure here only costs the speed-up."""
    started = time.perf_counter()
    try:
        from air.viewer import stats as rollout_stats  # noqa: F401  (imports pandas, altair)
        from air.viewer.index import shared_index

        index = shared_index(directory).refresh()
        rollout_stats.index_frame(index)
        took = time.perf_counter() - started
        print(
            f"air view: ready: {len(index.rollouts):,} rollouts and {len(index.problems):,} unreadable files "
            f"indexed in {took:.1f} s",
            file=sys.stderr,
            flush=True,
        )
    except Exception as exc:  # noqa: BLE001  (the page reports real problems itself)
        print(f"air view: warm-up skipped ({type(exc).__name__}: {exc})", file=sys.stderr)
