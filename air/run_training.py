"""The ``air`` command line.

Each subcommand is one ``_register_*`` function (its arguments) plus one ``cmd_*`` function (what
it does, returning an exit code). Expected failures raise :class:`CommandError`; ``main`` prints
them as one line on stderr and returns 1, without a traceback.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence


class CommandError(Exception):
    """A failure the user can act on: printed as ``air: error: <message>``, exit status 1."""


# --------------------------------------------------------------------------- build-image


def _register_build_image(subparsers: argparse._SubParsersAction) -> None:
    from air.image import BASE_MODES

    parser = subparsers.add_parser(
        "build-image",
        help="build the sandbox image (air-sandbox:<recipe hash>) if it is missing",
        description=(
            "Build the Docker image agent rollouts run in, from the recipe in docker/. "
            "The tag is air-sandbox:<hash of the recipe>; nothing is done when it already exists. "
            "Progress goes to stderr; the tag is printed on stdout."
        ),
    )
    parser.add_argument(
        "--base",
        choices=BASE_MODES,
        default="auto",
        help=(
            "where the Debian base comes from: 'registry' pulls the Dockerfile's default base; "
            "'debootstrap' makes air-debian-base:bookworm locally (needs root and debootstrap); "
            "'auto' (default) uses a local base, else tries a pull, else debootstraps"
        ),
    )
    parser.add_argument("--force", action="store_true", help="rebuild (without cache) even if the tag exists")
    parser.add_argument("--tag-only", action="store_true", help="print the tag the current recipe hashes to and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every build output line")
    parser.set_defaults(func=cmd_build_image)


def cmd_build_image(args: argparse.Namespace) -> int:
    from air import image

    try:
        if args.tag_only:
            print(image.default_image_tag())
            return 0
        result = image.build_image(base=args.base, force=args.force, progress=image.RichProgress(verbose=args.verbose))
    except image.AirImageError as exc:
        raise CommandError(str(exc)) from exc
    print(result.tag)
    return 0


# --------------------------------------------------------------------------- tasks


def _register_tasks(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("tasks", help="list the tasks of a task root")
    parser.add_argument(
        "--task-root", help="an MLGym checkout or folder in its layout (default: $MLGYM_ROOT, else built-in)"
    )
    parser.set_defaults(func=cmd_tasks)


def cmd_tasks(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from air.tasks import TaskError, list_tasks, load_task, resolve_task_root

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


def _register_demo(subparsers: argparse._SubParsersAction) -> None:
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

    from air.demo import run_demo
    from air.sandbox import SandboxConfig, SandboxError
    from air.tasks import TaskError, list_tasks

    try:
        names = args.tasks or list_tasks(args.task_root)
        config = SandboxConfig(image=args.image, run_id="demo")
        ok = asyncio.run(run_demo(names, args.task_root, config, Console()))
    except (TaskError, SandboxError) as exc:
        raise CommandError(str(exc)) from exc
    return 0 if ok else 1


# --------------------------------------------------------------------------- standalone


def _register_standalone(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "standalone",
        help="run GRPO-style steps of rollouts without prime-rl or a GPU (scripted agent or any endpoint)",
    )
    parser.add_argument("--task", action="append", dest="tasks", help="a task (repeatable; default: laneMerge)")
    parser.add_argument("--task-root", help="an MLGym checkout (default: $MLGYM_ROOT, else built-in tasks)")
    parser.add_argument("--env", default="air_mlgym", help="env id: air_mlgym, or simple_env (no Docker)")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--batch-size", type=int, default=8, help="rollouts per step")
    parser.add_argument("--rollouts-per-example", type=int, default=4, help="group size")
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--policy", default="noisy", help="scripted agent: baseline|improve|noisy|replay:PATH")
    parser.add_argument("--base-url", help="OpenAI-compatible endpoint (.../v1); default: the scripted agent")
    parser.add_argument("--model", help="model name at the endpoint")
    parser.add_argument("--api-key-var", default="OPENAI_API_KEY", help="env var holding the endpoint's key")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output-dir", help="where rollouts and summary.json go (default: outputs/standalone/<time>)")
    parser.add_argument(
        "--env-arg", action="append", default=[], metavar="KEY=JSON", help="extra env argument (repeatable)"
    )
    parser.add_argument(
        "--wandb",
        action="store_true",
        help="also log steps and sample rollouts to Weights & Biases (pip install 'air-agent[wandb]')",
    )
    parser.add_argument("--wandb-project", help="W&B project (default: $WANDB_PROJECT, else air-agent)")
    parser.add_argument("--wandb-name", help="W&B run name (default: $WANDB_NAME, else W&B's)")
    parser.add_argument(
        "--wandb-table-every",
        type=int,
        default=0,
        metavar="N",
        help="also log the samples table every N steps (default: only at the end)",
    )
    parser.set_defaults(func=cmd_standalone)


def cmd_standalone(args: argparse.Namespace) -> int:
    import asyncio
    import json

    from pydantic import ValidationError
    from rich.console import Console

    from air.standalone import StandaloneSettings, run_standalone
    from air.standalone_view import StandaloneProgress

    env_args = {}
    for item in args.env_arg:
        key, sep, value = item.partition("=")
        if not sep:
            raise CommandError(f"--env-arg {item!r}: expected KEY=VALUE")
        try:
            env_args[key] = json.loads(value)
        except json.JSONDecodeError:
            env_args[key] = value
    fields = dict(
        tasks=args.tasks or ["laneMerge"],
        task_root=args.task_root,
        env=args.env,
        env_args=env_args,
        steps=args.steps,
        batch_size=args.batch_size,
        rollouts_per_example=args.rollouts_per_example,
        max_turns=args.max_turns,
        policy=args.policy,
        base_url=args.base_url,
        model=args.model,
        api_key_var=args.api_key_var,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        seed=args.seed,
        output_dir=args.output_dir,
    )
    try:
        settings = StandaloneSettings(**fields)
    except ValidationError as exc:
        problems = [f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()]
        raise CommandError("; ".join(problems)) from None
    loggers = []
    if args.wandb:
        from air.wandb_logging import WandbStepLogger, WandbUnavailable

        try:
            loggers.append(
                WandbStepLogger(project=args.wandb_project, name=args.wandb_name, table_every=args.wandb_table_every)
            )
        except WandbUnavailable as exc:
            raise CommandError(str(exc)) from exc
    console = Console()
    view = StandaloneProgress(console, settings)
    try:
        with view:
            summary = asyncio.run(
                run_standalone(settings, on_step=view.step_done, on_rollout=view.rollout_done, loggers=loggers)
            )
    except (ValueError, RuntimeError) as exc:  # bad env args, unknown task, no Docker, bad policy spec
        raise CommandError(str(exc)) from exc
    view.print_summary(summary)
    return 0 if summary["masked"] < summary["rollouts"] else 1


# --------------------------------------------------------------------------- check


def _register_check(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="preflight before training: config, Docker, image, tasks, GPUs, endpoint, prime-rl, env, leftovers",
        description=(
            "Check everything a training run needs, touching no GPU: the config against prime-rl's schema and "
            "cross-field rules, the Docker engine and sandbox image, the task root and every task's files and "
            "data, the GPU layout against nvidia-smi (never kills), an inference endpoint, prime-rl's install, "
            "air_mlgym loading through verifiers with the config's args, and leftovers of earlier runs. "
            "Exit status 1 when anything fails."
        ),
    )
    parser.add_argument(
        "--config",
        action="append",
        default=[],
        metavar="FILE",
        help="a prime-rl TOML (repeatable: orch.toml, train.toml and infer.toml of one run are cross-checked)",
    )
    parser.add_argument("--endpoint", help="an inference server to probe (http://host:port/v1)")
    parser.add_argument("--prime-rl", dest="prime_rl", help="prime-rl checkout (default: $PRIME_RL_DIR, ~/prime-rl)")
    parser.add_argument("--nvidia-smi", dest="nvidia_smi", help="the nvidia-smi executable (default: on PATH)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    import json
    from pathlib import Path

    from air.preflight import PreflightOptions, exit_code, rows_as_json, run_preflight

    options = PreflightOptions(
        configs=[Path(c) for c in args.config],
        endpoint=args.endpoint,
        prime_rl_dir=args.prime_rl,
        nvidia_smi=args.nvidia_smi,
    )
    if args.json:
        rows = run_preflight(options)
        print(json.dumps(rows_as_json(rows), indent=2))
        return exit_code(rows)
    from rich.console import Console

    from air.preflight_view import render_rows

    console = Console()
    with console.status("checking...") as status:
        rows = run_preflight(options, on_row=lambda row: status.update(f"checked {row.check}"))
    render_rows(console, rows)
    return exit_code(rows)


# --------------------------------------------------------------------------- clean


def _register_clean(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "clean",
        help="stop what this project left behind: its labelled containers and the process trees it recorded",
        description=(
            "Lists, then with --yes stops, only what air started: sandbox containers carrying air's labels on this "
            "host whose owning process died, and processes of trees `air train` recorded whose launcher has "
            "exited. It never kills by process name and never touches other users' processes."
        ),
    )
    parser.add_argument("--yes", action="store_true", help="act: without it, only show what would be stopped")
    parser.add_argument(
        "--include-running", action="store_true", help="also stop containers and trees of runs that are still going"
    )
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL (default 10)")
    parser.set_defaults(func=cmd_clean)


def cmd_clean(args: argparse.Namespace) -> int:
    from rich.console import Console

    from air.cleanup import execute_clean, plan_clean
    from air.cleanup_view import render_plan, render_report

    console = Console()
    plan = plan_clean(include_running=args.include_running)
    render_plan(console, plan)
    if plan.empty:
        if plan.records and args.yes:
            execute_clean(plan, grace=args.grace)  # only tidies records of finished runs
        return 0
    if not args.yes:
        console.print("Nothing was stopped. Run [bold]air clean --yes[/bold] to stop the above.")
        return 0
    report = execute_clean(plan, grace=args.grace)
    render_report(console, report)
    failed = [c for c, outcome in report.containers if outcome.startswith("failed")]
    failed += [p for p in report.processes if p.outcome.startswith("failed")]
    return 1 if failed else 0


# --------------------------------------------------------------------------- train


def _register_train(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="preflight, then run prime-rl's `rl` on a config from any directory, recording its process tree",
        description=(
            "Runs `air check` on the config (stops on a failure), then `uv run rl @ CONFIG` in prime-rl's project "
            "(UV_PROJECT), from the current directory, in a new session. The launcher's process tree is recorded; "
            "when it exits, whatever is left of the tree (vLLM workers, trainer ranks) is stopped, and anything "
            "that survives stays recorded for `air clean`. Ctrl-C is passed to the whole run."
        ),
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="a prime-rl rl TOML (configs/mlgym/*.toml)")
    parser.add_argument("--prime-rl", dest="prime_rl", help="prime-rl checkout (default: $PRIME_RL_DIR, ~/prime-rl)")
    parser.add_argument("--no-check", action="store_true", help="skip the preflight")
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL for leftovers")
    parser.add_argument("rl_args", nargs=argparse.REMAINDER, help="after --: extra arguments for rl (overrides)")
    parser.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    import os
    import shutil
    from pathlib import Path

    from rich.console import Console

    from air.launcher import launch
    from air.preflight import PreflightOptions, exit_code, run_preflight
    from air.preflight_view import render_rows
    from air.prime_rl import find_prime_rl

    console = Console()
    config = Path(args.config).expanduser().resolve()
    if not config.is_file():
        raise CommandError(f"--config {args.config}: no such file")
    install = find_prime_rl(args.prime_rl)
    if install is None or not (install.root / "pyproject.toml").exists():
        where = install.root if install else "$PRIME_RL_DIR or ~/prime-rl"
        raise CommandError(
            f"no prime-rl checkout at {where}: run `bash scripts/install_prime_rl.sh` or pass --prime-rl"
        )
    uv = shutil.which("uv")
    if uv is None:
        raise CommandError("uv is not on PATH (prime-rl starts its parts with `uv run`): pip install uv")
    if not args.no_check:
        with console.status("air check ..."):
            rows = run_preflight(PreflightOptions(configs=[config], prime_rl_dir=str(install.root)))
        render_rows(console, rows)
        if exit_code(rows):
            raise CommandError("the preflight failed (above); fix it, or pass --no-check to start anyway")
    extra = args.rl_args[1:] if args.rl_args[:1] == ["--"] else args.rl_args
    command = [uv, "run", "rl", "@", str(config), *extra]
    # UV_PROJECT makes this and every `uv run` prime-rl starts (inference, orchestrator) use its project,
    # whatever the current directory; outputs land in the current directory.
    env = {**os.environ, "UV_PROJECT": str(install.root)}
    env.pop("VIRTUAL_ENV", None)
    console.print(f"[bold]air:[/bold] {' '.join(command)}  (UV_PROJECT={install.root}, cwd {Path.cwd()})")
    result = launch(
        command,
        env=env,
        kind="rl",
        config=str(config),
        grace=args.grace,
        on_event=lambda line: console.print(f"[bold]air:[/bold] {line}"),
    )
    return result.exit_code


# --------------------------------------------------------------------------- replay


def _register_replay(subparsers: argparse._SubParsersAction) -> None:
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

    from air.replay import ReplayError, render_comparison, replay_trajectory

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


def _register_policy_server(subparsers: argparse._SubParsersAction) -> None:
    from air.policy_server import register_cli

    register_cli(subparsers)


def _register_view(subparsers: argparse._SubParsersAction) -> None:
    from air.visualize_launch import register_cli

    register_cli(subparsers)


# --------------------------------------------------------------------------- wiring

_REGISTRARS: list[Callable[[argparse._SubParsersAction], None]] = [
    _register_build_image,
    _register_tasks,
    _register_demo,
    _register_standalone,
    _register_policy_server,
    _register_replay,
    _register_view,
    _register_check,
    _register_train,
    _register_clean,
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
        print(f"air: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("air: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
