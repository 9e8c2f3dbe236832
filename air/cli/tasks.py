"""``air tasks`` and ``air demo``: what tasks there are, and their baselines reproduced."""

from __future__ import annotations

import argparse

from air.cli.errors import CommandError


def register_tasks(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tasks", help="list the tasks of a task root")
    parser.add_argument(
        "--task-root", help="an MLGym checkout or folder in its layout (default: $MLGYM_ROOT, else built-in)"
    )
    parser.set_defaults(func=cmd_tasks)


def cmd_tasks(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from air.tasks.config import TaskError
    from air.tasks.loader import list_tasks, load_task, resolve_task_root

    try:
        root = resolve_task_root(args.task_root)
        table = Table(title=f"Tasks in {root}")
        for column in ("task", "id"):
            table.add_column(column, no_wrap=True)  # names are what users copy: never cut them
        for column in ("entrypoint", "primary metric", "baseline", "secret files"):
            table.add_column(column, overflow="fold")
        for name in list_tasks(root):
            try:
                task = load_task(name, root)
            except TaskError as exc:
                table.add_row(name, "", "", "", "", f"[red]{exc}[/red]")
                continue
            direction = "higher" if task.higher_is_better else "lower"
            table.add_row(
                name,
                task.id,
                task.entrypoint,
                f"{task.primary_metric} ({direction})",
                f"{task.baseline_score}",
                ", ".join(task.secret_files),
            )
    except TaskError as exc:
        raise CommandError(str(exc)) from exc
    Console().print(table)
    return 0


# --------------------------------------------------------------------------- demo


def register_demo(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="reproduce every task's baseline in fresh sandboxes (the end-to-end check without GPUs)",
    )
    parser.add_argument("--task", action="append", dest="tasks", help="a task to run (repeatable; default: all)")
    parser.add_argument(
        "--task-root", help="an MLGym checkout or folder in its layout (default: $MLGYM_ROOT, else built-in)"
    )
    parser.add_argument("--image", default="", help="sandbox image (default: $AIR_IMAGE, else the recipe's tag)")
    parser.set_defaults(func=cmd_demo)


def cmd_demo(args: argparse.Namespace) -> int:
    import asyncio

    from rich.console import Console

    from air.runs.demo import run_demo
    from air.sandbox.config import SandboxConfig
    from air.sandbox.errors import SandboxError
    from air.tasks.config import TaskError
    from air.tasks.loader import list_tasks

    try:
        names = args.tasks or list_tasks(args.task_root)
        config = SandboxConfig(image=args.image, run_id="demo")
        ok = asyncio.run(run_demo(names, args.task_root, config, Console()))
    except (TaskError, SandboxError) as exc:
        raise CommandError(str(exc)) from exc
    return 0 if ok else 1
