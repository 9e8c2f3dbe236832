"""The ``air`` command line.

Each subcommand is one ``register_*`` function (its arguments) plus one ``cmd_*`` function (what
it does, returning an exit code), in the module of its command group (``air.cli.*``). Expected
failures raise :class:`CommandError`; ``main`` prints them as one line on stderr and returns 1,
without a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from air.cli.errors import CommandError
from air.cli.fleet import register_fleet
from air.cli.launch import register_check, register_clean, register_train
from air.cli.models import register_smollm2
from air.cli.rehearse import register_rehearse
from air.cli.replay import register_replay
from air.cli.runs import register_policy_server, register_standalone, register_tiny_model
from air.cli.sandbox import register_build_image
from air.cli.tasks import register_demo, register_tasks
from air.cli.view import register_view
from air.sandbox.neutral import neutral

_REGISTRARS: list[Callable[[argparse._SubParsersAction], None]] = [
    register_build_image,
    register_tasks,
    register_demo,
    register_standalone,
    register_policy_server,
    register_tiny_model,
    register_smollm2,
    register_replay,
    register_view,
    register_check,
    register_rehearse,
    register_train,
    register_clean,
    register_fleet,
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="air", description="Train language models to do ML research with RL, in Docker sandboxes."
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for register in _REGISTRARS:
        register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    try:
        return func(args)
    except CommandError as exc:
        print(f"air: error: {neutral(exc, lines=True)}", file=sys.stderr)  # it may quote a container or the model
        return 1
    except KeyboardInterrupt:
        print("air: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
