"""``air fleet submit DIR --nodes 4``: the fleet's env nodes as one Slurm job (air.fleet.slurm)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from air.cli.errors import CommandError


def register_submit(commands: argparse._SubParsersAction) -> None:
    submit = commands.add_parser(
        "submit", help="submit the env nodes as one Slurm job (a step per node)", description=cmd_submit.__doc__
    )
    submit.add_argument("folder", type=Path)
    submit.add_argument("--nodes", type=int, required=True, help="how many env nodes")
    submit.add_argument("--partition", help="sbatch --partition")
    submit.add_argument("--gpus-per-node", type=int, help="GPUs per env node, given to its tasks' containers")
    submit.add_argument("--time", help="sbatch --time")
    submit.add_argument(
        "--restart-delay", type=float, default=5.0, help="seconds before a node's ended step restarts (default: 5)"
    )
    submit.add_argument("--sbatch-arg", action="append", default=[], help="another sbatch option (repeatable)")
    submit.add_argument("--node-args", default="", help="options for each env node (fleet node), e.g. '--capacity 8'")
    submit.add_argument("--dry-run", action="store_true", help="write the script, do not submit it")
    submit.set_defaults(func=cmd_submit)


def cmd_submit(args: argparse.Namespace) -> int:
    """Write FOLDER/env-nodes.sbatch, one Slurm job with a job step per env node (`air fleet node DIR` on each,
    started again when it ends), and submit it with sbatch; --dry-run only writes it."""
    from pydantic import ValidationError

    from air.fleet.errors import FleetError
    from air.fleet.folder import FleetFolder
    from air.fleet.slurm import SlurmJob, submit

    try:
        job = SlurmJob(
            nodes=args.nodes,
            partition=args.partition,
            gpus_per_node=args.gpus_per_node,
            time=args.time,
            restart_delay_s=args.restart_delay,
            sbatch_args=args.sbatch_arg,
            node_args=shlex.split(args.node_args),
        )
        script, job_id = submit(FleetFolder(args.folder), job, dry_run=args.dry_run)
    except ValidationError as exc:
        raise CommandError(f"air fleet submit: {exc.errors()[0]['loc'][0]}: {exc.errors()[0]['msg']}") from exc
    except FleetError as exc:
        raise CommandError(str(exc)) from exc
    print(f"wrote {script}" + (f"; submitted as Slurm job {job_id}" if job_id else " (not submitted: --dry-run)"))
    return 0
