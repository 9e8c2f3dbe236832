"""``air rehearse``: prime-rl's real orchestrator drives the env on this machine before GPUs are booked."""

from __future__ import annotations

import argparse

from air.cli.errors import CommandError
from air.cli.help import DefaultsHelpFormatter
from air.cli.options import add_model_options, settings_from_args
from air.rehearsal.settings import RehearsalSettings


def register_rehearse(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rehearse",
        help="run a config's data path with prime-rl's orchestrator on the CPU (scripted server, tiny model)",
        description=cmd_rehearse.__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    add_model_options(parser, RehearsalSettings)
    parser.add_argument("--json", action="store_true", help="also print the figures as one JSON object, last line")
    parser.set_defaults(func=cmd_rehearse)


def cmd_rehearse(args: argparse.Namespace) -> int:
    """Run prime-rl's own orchestrator (pinned commit, its env workers) for a few steps on this machine:
    real rollouts in containers, answered by a scripted policy behind a server that speaks vLLM's protocol
    with a tiny local model's token ids and logprobs, and a stand-in trainer that only publishes what the
    orchestrator waits for. Then reads what the orchestrator handed the trainer and reports samples,
    rewards, advantages and the loss mask. Exit status 1 when the run could not teach a model anything.
    With --trainer, prime-rl's own trainer learns from those batches live, and the report adds per step its
    loss, grad norm, parameter change and memory, the broadcasts the server loaded, and a fixed sample's
    logprob before and after (exit 1 when it did not learn).
    A config for today's prime-rl (configs/mlgym-v1/) runs its env servers too, one per source, unless
    --external-env-server names one started separately.
    Needs: bash scripts/install_prime_rl.sh --orchestrator-only [--commit 559b447] (with --trainer:
    --cpu-trainer in its place, the same install plus the trainer's packages), Docker and the image."""
    from air.cli.console import output_console
    from air.rehearsal.errors import RehearsalError
    from air.rehearsal.progress import StepProgress
    from air.rehearsal.rehearse import rehearse
    from air.rehearsal.report_view import json_line, show

    settings = settings_from_args(RehearsalSettings, args)
    console = output_console(stderr=args.json)
    try:
        with StepProgress(console) as progress:
            report = rehearse(settings, progress.update)
    except RehearsalError as exc:
        raise CommandError(str(exc)) from exc
    show(report, console)
    if args.json:
        print(json_line(report), flush=True)
    return 1 if report.problems() else 0
