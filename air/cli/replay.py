"""``air replay``: a recorded trajectory re-run in a fresh container, its score compared."""

from __future__ import annotations

import argparse

from air.cli.errors import CommandError

DESCRIPTION = """\
Re-run the commands of a recorded rollout (one of ours, or an MLGym run) in a fresh container and
compare each evaluation's score with the recorded one; the exit code is 0 when all match. Our
recordings carry the seed their evaluations drew from, so a game's sampled matches replay exactly;
MLGym's runs carry none, and their game scores are compared within 2%. A file of the task that differs
from what the run showed (MLGym changed files since its published runs) is named as a warning."""


def register_replay(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="re-run a recorded trajectory (ours or an MLGym run) in a fresh container and compare scores",
        description=DESCRIPTION,
    )
    parser.add_argument("path", help="a trajectory JSON file, an MLGym .traj file or an MLGym run folder")
    parser.add_argument(
        "--task-root",
        help="the task root it ran on, e.g. an MLGym checkout (default: the recorded one if it exists, "
        "else $MLGYM_ROOT, else the built-in tasks)",
    )
    parser.add_argument(
        "--image",
        help="sandbox image to replay on (default: the recorded one if this machine has it, else $AIR_IMAGE, "
        "else this recipe's tag, saying so)",
    )
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON (default: a table)")
    parser.add_argument("--save", metavar="DIR", help="keep the replay's own trajectory in DIR (default: not kept)")
    parser.add_argument(
        "--tolerance",
        type=float,
        help="relative/absolute score tolerance (default: 0.0001; 0.02 for games recorded without a seed)",
    )
    parser.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    """Exit status: 0 reproduced, 1 not (or an error), 130 on Ctrl-C, 143 on SIGTERM (docs/standalone.md)."""
    import asyncio
    import json
    import signal
    import sys
    import threading

    from air.cli.console import output_console
    from air.cli.runs import require_classic_front
    from air.runs.interruption import Terminated
    from air.runs.replay import ReplayError, render_comparison, replay_trajectory

    require_classic_front("air replay")

    def terminated(signum: int, frame: object) -> None:  # before the rollout (it takes SIGTERM over then)
        raise Terminated("the replay was stopped (SIGTERM) before its rollout started")

    main_thread = threading.current_thread() is threading.main_thread()  # signal handlers are set only there
    previous = signal.signal(signal.SIGTERM, terminated) if main_thread else None
    try:
        comparison = asyncio.run(
            replay_trajectory(
                args.path, task_root=args.task_root, image=args.image, save_dir=args.save, tolerance=args.tolerance
            )
        )
    except ReplayError as exc:
        raise CommandError(str(exc)) from exc
    except Terminated as exc:
        print(f"air: terminated: {exc}", file=sys.stderr)
        return 143  # 128 + SIGTERM, as a shell reports a process SIGTERM ended
    except SystemExit as exc:  # verifiers' own SIGTERM handler (exit(143)), between its env's load and the rollout
        if exc.code != 143:
            raise
        print("air: terminated: the replay was stopped (SIGTERM)", file=sys.stderr)
        return 143
    finally:
        if main_thread:
            signal.signal(signal.SIGTERM, previous)
    if args.json:
        print(json.dumps(comparison, indent=2))
    else:
        render_comparison(comparison, output_console())
    return 0 if comparison["reproduced"] else 1
