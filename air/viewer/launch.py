"""The viewer's server (``air view DIR``), warmed up before the first browser arrives.

It is ``streamlit run air/visualize.py -- --trajectory_dir DIR`` run in this process (through
Streamlit's own command line, so every ``--server.*`` option behaves as documented), plus a
background thread that imports the viewer's libraries and indexes DIR while the server starts:
the first page then only renders (measured in experiments.md).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

APP = Path(__file__).resolve().parents[1] / "visualize.py"  # the Streamlit script
INSTALL_HINT = "pip install 'air-mlgym[viewer]' (this project's own environment has it: `uv run air view DIR`)"


def streamlit_arguments(directory: Path, host: str, port: int | None, browser: bool) -> list[str]:
    options = ["--server.address", host, "--server.headless", "false" if browser else "true"]
    options += ["--server.port", str(port)] if port is not None else []
    options += ["--browser.gatherUsageStats", "false", "--client.toolbarMode", "viewer"]
    return ["run", str(APP), *options, "--", "--trajectory_dir", str(directory)]


def serve(directory: Path, host: str = "127.0.0.1", port: int | None = None, browser: bool = False) -> int:
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
