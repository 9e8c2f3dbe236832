"""``air view DIR``: the trajectory viewer (the server and its warm-up are ``air.viewer.launch``)."""

from __future__ import annotations

import argparse
import importlib.util
import threading
from pathlib import Path

from air.cli.errors import CommandError
from air.cli.help import DefaultsHelpFormatter
from air.launch.rl_runs import last_rl_run
from air.viewer.launch import (
    DEFAULT_PORT,
    INSTALL_HINT,
    ViewerPortError,
    address_lines,
    announce_when_answering,
    choose_port,
    port_free,
    serve,
    starting_lines,
    warm_up,
)


def register_view(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "view",
        help="open the trajectory viewer on a folder of rollouts (ours or MLGym runs)",
        description=cmd_view.__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument(
        "directory",
        metavar="DIR",
        nargs="?",
        help="a folder of runs or trajectories, at any depth: outputs/standalone (every standalone run), one "
        "run's folder, outputs/trajectories (prime-rl's) or an MLGym trajectory folder; none: the folder of "
        "the last `uv run rl` on this machine",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on; 0.0.0.0 listens on every interface")
    parser.add_argument("--port", type=int, help=f"port (default: {DEFAULT_PORT}, or the next free one)")
    parser.add_argument("--browser", action="store_true", help="also open a browser on this machine")
    parser.set_defaults(func=cmd_view)


def cmd_view(args: argparse.Namespace) -> int:
    """Serve the Streamlit trajectory viewer for DIR: our trajectory JSON and MLGym run folders at any
    depth, each rollout shown with its run (several runs' groups are never pooled). Prints the URL once
    the server answers there, and the ssh -L line that forwards its port from another machine. A --port
    in use is refused."""
    if importlib.util.find_spec("streamlit") is None:
        raise CommandError(f"the viewer needs Streamlit, which this environment lacks: {INSTALL_HINT}")
    if args.directory is None:
        last = last_rl_run()
        if last is None:
            raise CommandError("no DIR given and no `uv run rl` recorded on this machine: give the folder to open")
        print(f"the last rl run's folder: {last}", flush=True)
    directory = Path(args.directory).expanduser() if args.directory is not None else last
    if not directory.is_dir():
        raise CommandError(f"{directory}: no such folder (give the folder holding the trajectories)")
    directory = directory.resolve()
    try:
        port = choose_port(args.host, args.port)
    except ViewerPortError as exc:
        raise CommandError(str(exc)) from None
    for line in starting_lines(port, args.port):
        print(line, flush=True)
    # The URL only once it answers: printed at once, it was opened seconds before anything listened there.
    stopped = threading.Event()
    announce = (args.host, port, address_lines(args.host, port), stopped)
    threading.Thread(target=announce_when_answering, args=announce, name="air-view-announce", daemon=True).start()
    threading.Thread(target=warm_up, args=(directory,), name="air-view-warm-up", daemon=True).start()
    try:
        status = serve(directory, host=args.host, port=port, browser=args.browser)
    finally:
        stopped.set()
    if status != 0 and not port_free(args.host, port):  # taken between the choice and Streamlit's bind
        raise CommandError(f"port {port} on {args.host} was taken as the viewer started: run it again")
    return status
