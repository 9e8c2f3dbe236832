"""``air replay``: a recorded trajectory re-run in a fresh container, its score compared."""

from __future__ import annotations

import argparse

from air.cli.errors import CommandError


def register_replay(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "replay", help="re-run a recorded trajectory (ours or an MLGym run) in a fresh container and compare scores"
    )
    parser.add_argument("path", help="a trajectory JSON file, an MLGym .traj file or an MLGym run folder")
    parser.add_argument("--task-root", help="the task root it ran on (default: recorded, else $MLGYM_ROOT/built-in)")
    parser.add_argument("--json", action="store_true", help="print the comparison as JSON")
    parser.add_argument("--save", metavar="DIR", help="keep the replay's own trajectory in DIR")
    parser.add_argument("--tolerance", type=float, help="relative/absolute score tolerance (default: per task kind)")
    parser.set_defaults(func=cmd_replay)


def cmd_replay(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from air.runs.replay import ReplayError, render_comparison, replay_trajectory

    try:
        comparison = asyncio.run(
            replay_trajectory(args.path, task_root=args.task_root, save_dir=args.save, tolerance=args.tolerance)
        )
    except ReplayError as exc:
        raise CommandError(str(exc)) from exc
    if args.json:
        print(json.dumps(comparison, indent=2))
    else:
        render_comparison(comparison)
    return 0 if comparison["reproduced"] else 1
