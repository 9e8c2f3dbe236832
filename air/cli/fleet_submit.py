"""``air fleet submit DIR --nodes 4``: the fleet's env nodes as one Slurm job (air.fleet.slurm)."""

from __future__ import annotations

import argparse
import shlex
from pathlib import Path

from air.cli.errors import CommandError
from air.cli.help import DefaultsHelpFormatter
from air.cli.options import add_model_options, settings_from_args
from air.fleet.slurm import SlurmJob


def register_submit(commands: argparse._SubParsersAction) -> None:
    submit = commands.add_parser(
        "submit",
        help="submit the env nodes as one Slurm job (a step per node)",
        description=cmd_submit.__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    submit.add_argument("folder", type=Path)
    add_model_options(submit, SlurmJob)
    submit.add_argument("--node-args", help="options for each env node (fleet node), e.g. '--capacity 8'")
    submit.add_argument("--dry-run", action="store_true", help="write the script, do not submit it")
    submit.set_defaults(func=cmd_submit)


def cmd_submit(args: argparse.Namespace) -> int:
    """Write FOLDER/env-nodes.sbatch, one Slurm job with a job step per env node (`air fleet node DIR` on each,
    started again when it ends), and submit it with sbatch; --dry-run only writes it."""
    from air.fleet.errors import FleetError
    from air.fleet.folder import FleetFolder
    from air.fleet.slurm import submit

    node_args = shlex.split(args.node_args or "")
    job = settings_from_args(SlurmJob, args, extra={"node_args": node_args}, command="air fleet submit")
    try:
        script, job_id = submit(FleetFolder(args.folder), job, dry_run=args.dry_run)
    except FleetError as exc:
        raise CommandError(str(exc)) from exc
    print(f"wrote {script}" + (f"; submitted as Slurm job {job_id}" if job_id else " (not submitted: --dry-run)"))
    return 0
