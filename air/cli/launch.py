"""``air check``, ``air train`` and ``air clean``: a prime-rl run, before, during and after."""

from __future__ import annotations

import argparse

from air.cli.errors import CommandError


def register_check(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "check",
        help="preflight before training: config, Docker, image, tasks, GPUs, endpoint, prime-rl, env, leftovers",
        description=cmd_check.__doc__,
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
    parser.add_argument("--fleet", metavar="DIR", help="a fleet folder (air fleet): how each env node is exposed")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.set_defaults(func=cmd_check)


def cmd_check(args: argparse.Namespace) -> int:
    """Check everything a training run needs, touching no GPU: the config against prime-rl's schema and
    cross-field rules, the Docker engine and sandbox image, the task root and every task's files and data, the
    GPU layout against nvidia-smi (never kills), an inference endpoint, prime-rl's install, air_mlgym
    loading through verifiers with the config's args, and leftovers of earlier runs. Exit status 1 when
    anything fails."""
    import json
    from pathlib import Path

    from air.cli.console import output_console
    from air.launch.preflight import CHECKS, run_preflight
    from air.launch.preflight_rows import PreflightOptions, exit_code, rows_as_json
    from air.launch.preflight_view import CheckStatus, render_rows

    options = PreflightOptions(
        configs=[Path(c) for c in args.config],
        endpoint=args.endpoint,
        prime_rl_dir=args.prime_rl,
        nvidia_smi=args.nvidia_smi,
    )
    console = output_console()
    total = len(CHECKS) + bool(args.fleet)
    # With --json, stdout holds the JSON alone: the progress goes to stderr.
    with CheckStatus(output_console(stderr=True) if args.json else console) as status:
        rows = run_preflight(options, on_check=lambda name, number, _of: status.check_started(name, number, total))
        if args.fleet:
            from air.fleet.exposure import fleet_rows

            status.check_started("fleet", total, total)
            rows += fleet_rows(args.fleet, say=status.say)
    if args.json:
        print(json.dumps(rows_as_json(rows), indent=2))
        return exit_code(rows)
    render_rows(console, rows, status.seconds)
    return exit_code(rows)


# --------------------------------------------------------------------------- clean


def _grace() -> float:
    """What stops a process tree waits between SIGTERM and SIGKILL when not told: its own default, not a copy."""
    import inspect

    from air.launch.process_control import stop_processes

    return inspect.signature(stop_processes).parameters["grace"].default


def register_clean(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "clean",
        help="stop what this project left behind: its labelled containers and the process trees it recorded",
        description=cmd_clean.__doc__,
    )
    parser.add_argument("--yes", action="store_true", help="act: without it, only show what would be stopped")
    parser.add_argument(
        "--include-running", action="store_true", help="also stop containers and trees of runs that are still going"
    )
    parser.add_argument(
        "--grace", type=float, default=_grace(), help="seconds between SIGTERM and SIGKILL (default: %(default)s)"
    )
    parser.set_defaults(func=cmd_clean)


def cmd_clean(args: argparse.Namespace) -> int:
    """Lists, then with --yes stops, only what air started: sandbox containers carrying air's labels on this host
    whose owning process died, and processes of trees `air train` recorded whose launcher has exited. It
    never kills by process name and never touches other users' processes."""
    from air.cli.console import output_console
    from air.launch.cleanup import execute_clean, plan_clean
    from air.launch.cleanup_view import render_plan, render_report

    console = output_console()
    plan = plan_clean(include_running=args.include_running)
    render_plan(console, plan)
    if plan.empty:
        if plan.records and args.yes:
            execute_clean(plan, grace=args.grace)  # only tidies records of finished runs
        return 0
    if not args.yes:
        console.print("Nothing was stopped. Run `air clean --yes` to stop the above.")
        return 0
    report = execute_clean(plan, grace=args.grace)
    render_report(console, report)
    failed = [c for c, outcome in report.containers if outcome.startswith("failed")]
    failed += [p for p in report.processes if p.outcome.startswith("failed")]
    return 1 if failed else 0


# --------------------------------------------------------------------------- train


def register_train(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="preflight, then run prime-rl's `rl` on a config from any directory, recording its process tree",
        description=cmd_train.__doc__,
    )
    parser.add_argument("--config", required=True, metavar="FILE", help="a prime-rl rl TOML (configs/mlgym/*.toml)")
    parser.add_argument("--prime-rl", dest="prime_rl", help="prime-rl checkout (default: $PRIME_RL_DIR, ~/prime-rl)")
    parser.add_argument("--no-check", action="store_true", help="skip the preflight")
    parser.add_argument(
        "--grace",
        type=float,
        default=_grace(),
        help="seconds between SIGTERM and SIGKILL for leftovers (default: %(default)s)",
    )
    parser.add_argument("rl_args", nargs=argparse.REMAINDER, help="after --: extra arguments for rl (overrides)")
    parser.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    """Runs `air check` on the config (stops on a failure), then `uv run rl @ CONFIG` in prime-rl's project
    (UV_PROJECT), from the current directory, in a new session. The launcher's process tree is recorded;
    when it exits, whatever is left of the tree (vLLM workers, trainer ranks) is stopped, and anything
    that survives stays recorded for `air clean`. Ctrl-C is passed to the whole run."""
    import os
    import shutil
    from pathlib import Path

    from air.cli.console import output_console
    from air.launch.launcher import launch
    from air.launch.preflight import run_preflight
    from air.launch.preflight_rows import PreflightOptions, exit_code
    from air.launch.preflight_view import CheckStatus, render_rows
    from air.launch.prime_rl import find_prime_rl

    console = output_console()
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
        with CheckStatus(console) as status:
            rows = run_preflight(
                PreflightOptions(configs=[config], prime_rl_dir=str(install.root)), on_check=status.check_started
            )
        render_rows(console, rows, status.seconds)
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
