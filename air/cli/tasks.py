"""``air tasks`` and ``air demo``: what tasks there are, and their baselines reproduced."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from air.cli.errors import CommandError
from air.cli.help import DefaultsHelpFormatter

if TYPE_CHECKING:
    from rich.console import Console

TASK_ROOT_HELP = "an MLGym checkout or a folder in its layout, or 'builtin' (default: $MLGYM_ROOT, else built-in)"


def register_tasks(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tasks",
        help="list the tasks of a task root",
        description=cmd_tasks.__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument("--task-root", help=TASK_ROOT_HELP)
    parser.set_defaults(func=cmd_tasks)


def cmd_tasks(args: argparse.Namespace) -> int:
    """List the tasks of a task root: each one's submission kind, primary metric (arrow: which way is
    better), recorded baseline score and the files held back from the agent. A task whose config does not
    load is listed too, its error in full under the table."""
    from air.cli.console import output_console
    from air.tasks.config import TaskError
    from air.tasks.loader import resolve_task_root

    try:
        root = resolve_task_root(args.task_root)
    except TaskError as exc:
        raise CommandError(str(exc)) from exc
    print_tasks(root, output_console())
    return 0


def print_tasks(root: Path, console: Console) -> None:
    from rich import box
    from rich.table import Table
    from rich.text import Text

    from air.tasks.config import TaskError
    from air.tasks.loader import list_tasks, load_task

    # Light borders and no outer padding: MLGym's longest names and metrics fit 80 columns unbroken.
    table = Table(
        title=f"Tasks in {root}",
        caption="kind: task_entrypoint less 'SubmissionTasks'; secret: hidden from the agent",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
    )
    table.add_column("task", no_wrap=True)  # names are what users copy: never cut them
    table.add_column("kind", no_wrap=True)
    table.add_column("metric", overflow="fold")
    table.add_column("baseline", no_wrap=True, justify="right")
    broken: list[tuple[str, str]] = []
    for name in list_tasks(root):
        try:
            task = load_task(name, root)
        except TaskError as exc:
            broken.append((name, str(exc)))
            table.add_row(name, "", "[red]broken config, below[/red]", "")
            continue
        # The id only where it differs from the name: trajectories and known-leak tables use it.
        notes = [f"id {task.id}"] if task.id != name else []
        notes += [f"secret {path}" for path in task.secret_files]
        shown = Text(name)
        for note in notes:
            shown.append(f"\n  {note}", style="dim")
        table.add_row(
            shown,
            task.entrypoint.removesuffix("SubmissionTasks"),
            f"{task.primary_metric} {'↑' if task.higher_is_better else '↓'}",
            "" if task.baseline_score is None else f"{task.baseline_score:.6g}",
        )
    console.print(table)
    # In full, one line each (the terminal wraps it): a table cell would fold paths into a narrow column.
    for name, error in broken:
        console.print(Text.assemble((f"{name}: ", "bold red"), error), highlight=False, soft_wrap=True)


# --------------------------------------------------------------------------- demo


def register_demo(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="reproduce every task's baseline in fresh sandboxes (the end-to-end check without GPUs)",
        description=cmd_demo.__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument(
        "--task", action="append", dest="tasks", default=[], help="a task to run (repeatable; default: every task)"
    )
    parser.add_argument("--task-root", help=TASK_ROOT_HELP)
    parser.add_argument("--image", default="", help="sandbox image (default: $AIR_IMAGE, else the recipe's tag)")
    parser.add_argument(
        "--network",
        action="store_true",
        help="give the sandboxes a network, for tasks whose baseline downloads its dataset (Hugging Face hub)",
    )
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help="time limit of each baseline script (default: the task's training_timeout)",
    )
    parser.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    """Reproduce each task's baseline in a fresh sandbox: run its baseline script as the agent, evaluate
    the workspace as a rollout would, and compare with the score its config records. Each task ends as
    reproduced, differs, no baseline shipped, data missing (with the command that makes the data) or
    failed (with the whole reason). Exit status: 1 when a task differs or failed, else 0."""
    import asyncio

    from air.cli.console import output_console
    from air.runs.demo import demo_failed, run_demo
    from air.sandbox.config import SandboxConfig
    from air.sandbox.errors import SandboxError
    from air.tasks.config import TaskError
    from air.tasks.loader import list_tasks

    try:
        names = args.tasks or list_tasks(args.task_root)
        config = SandboxConfig(image=args.image, run_id="demo", network=args.network)
        results = asyncio.run(run_demo(names, args.task_root, config, output_console(), timeout=args.timeout))
    except (TaskError, SandboxError) as exc:
        raise CommandError(str(exc)) from exc
    return 1 if demo_failed(results) else 0
