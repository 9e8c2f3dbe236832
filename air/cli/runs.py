"""``air standalone``, ``air replay`` and ``air policy-server``: the env run on this machine, without prime-rl."""

from __future__ import annotations

import argparse
import inspect
import json
from pathlib import Path
from typing import TYPE_CHECKING

from air.cli.errors import CommandError
from air.cli.help import DefaultsHelpFormatter
from air.cli.options import add_model_options, settings_from_args
from air.policies.scripted import SPECS, PolicySpecError, make_policy, require_playable
from air.runs.standalone_settings import StandaloneSettings
from air.runs.standalone_settings import parse_env_arg as parse_env_arg  # where tests and users found it
from air.serving.models.served_model import MODEL_SPECS, is_model_spec, model_dir_for
from air.serving.models.tiny_model import TinyModelError, TinyModelSpec
from air.serving.server import PolicyServerError, serve_forever

if TYPE_CHECKING:
    from rich.console import Console

    from air.runs.run_folder import RunFolder


def register_policy_server(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "policy-server",
        help="serve a scripted agent as an OpenAI-compatible model (tests and runs without GPUs)",
        description=cmd_policy_server.__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    parser.add_argument(
        "--policy",
        default="baseline",
        help=f"policy spec: {', '.join(SPECS)}, or a model that samples: {', '.join(MODEL_SPECS)}",
    )
    served = inspect.signature(serve_forever).parameters  # the server's own defaults, not copies of them
    parser.add_argument("--host", default=served["host"].default, help="address to listen on")
    parser.add_argument(
        "--port", type=int, default=served["port"].default, help="port to listen on; 0 picks a free one"
    )
    parser.add_argument(
        "--seed", type=int, default=served["seed"].default, help="seed of the server's random generator"
    )
    parser.add_argument(
        "--vllm",
        metavar="MODEL_DIR",
        help="answer like vLLM serving MODEL_DIR (from `air tiny-model`): token ids, logprobs, weight routes",
    )
    parser.set_defaults(func=cmd_policy_server)


def cmd_policy_server(args: argparse.Namespace) -> int:
    """Serve a scripted policy on an OpenAI-compatible /v1/chat/completions endpoint, so vf-eval or `air
    standalone` can run episodes without model weights; or, with --policy smollm2 (or model:DIR), a real
    model on this CPU that samples its own replies, answering like vLLM. Serves until Ctrl-C."""
    from air.cli.hints import policy_server_hints

    try:
        return serve_forever(
            args.policy, host=args.host, port=args.port, seed=args.seed, vllm_model=args.vllm, hints=policy_server_hints
        )
    except (PolicySpecError, PolicyServerError, TinyModelError) as exc:
        raise CommandError(str(exc)) from exc


def register_tiny_model(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tiny-model",
        help="write a tiny tokenizer and random causal LM (offline) for `policy-server --vllm` and rehearsals",
        description=cmd_tiny_model.__doc__,
    )
    parser.add_argument("directory", help="where to write it (an existing tiny model of the same spec is kept)")
    parser.add_argument(
        "--seed", type=int, default=TinyModelSpec().seed, help="seed of the weights (default: %(default)s)"
    )
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty directory")
    parser.set_defaults(func=cmd_tiny_model)


def cmd_tiny_model(args: argparse.Namespace) -> int:
    """Write a byte-level BPE tokenizer trained on this project's own text, with a ChatML chat template,
    and a two-layer Llama with seeded random weights, to DIRECTORY. Offline and deterministic; loads with
    transformers (use the directory as `model.name` in a prime-rl config). Needs the `tiny` extra."""
    from air.cli.hints import tiny_model_hints
    from air.serving.models.tiny_model import write_tiny_model

    try:
        target = write_tiny_model(args.directory, TinyModelSpec(seed=args.seed), force=args.force)
    except TinyModelError as exc:
        raise CommandError(str(exc)) from exc
    print(f"Tiny model in {target}")
    for line in tiny_model_hints(str(target)):
        print(f"  serve it: {line}")
    return 0


def register_standalone(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "standalone",
        help="run GRPO-style steps of rollouts without prime-rl or a GPU (scripted agent or any endpoint)",
        description=cmd_standalone.__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    add_model_options(parser, StandaloneSettings)  # every field of the settings is an option
    parser.add_argument(
        "--wandb",
        action="store_true",
        help="also log steps and sample rollouts to Weights & Biases (pip install 'air-mlgym[wandb]')",
    )
    parser.add_argument("--wandb-project", help="W&B project; default: $WANDB_PROJECT, else air-agent")
    parser.add_argument("--wandb-name", help="W&B run name; default: $WANDB_NAME, else W&B's")
    parser.add_argument(
        "--wandb-table-every",
        type=int,
        metavar="N",
        help="also log the samples table every N steps (default: only at the end, as with 0)",
    )
    parser.set_defaults(func=cmd_standalone)


def cmd_standalone(args: argparse.Namespace) -> int:
    """Run steps of groups of rollouts of the env, as prime-rl's orchestrator would, and compute what its
    trainer would see (GRPO advantages, reward statistics). The agent is a scripted policy behind a real
    OpenAI-compatible server on loopback, a real model sampling on this CPU (--policy smollm2), or any
    endpoint (--base-url). Writes trajectories/, steps.jsonl,
    summary.json and run.log into the run's folder, printed at the start. Exit status: 0 when every step
    ran and some rollout was not masked, 1 otherwise, 130 on Ctrl-C."""
    require_classic_front("air standalone")
    settings = settings_from_args(StandaloneSettings, args)
    if settings.base_url is None:
        try:
            # A bad spec, or a task the policy cannot play, fails here: before any folder or container.
            if is_model_spec(settings.policy):
                settings.vllm_model = str(model_dir_for(settings.policy))  # prepared now (once), or refused
            else:
                require_playable(make_policy(settings.policy), settings.tasks or [])
        except (PolicySpecError, TinyModelError) as exc:
            raise CommandError(str(exc)) from exc
    _check_before_start(settings)
    loggers = []
    if args.wandb:
        from air.runs.wandb_logging import WandbStepLogger, WandbUnavailable

        try:
            every = {} if args.wandb_table_every is None else {"table_every": args.wandb_table_every}  # else its own
            loggers.append(WandbStepLogger(project=args.wandb_project, name=args.wandb_name, **every))
        except WandbUnavailable as exc:
            raise CommandError(str(exc)) from exc
    # The run's folder, claimed now: printed first, and its summary is found there if the run stops.
    folder = _claim_folder_and_probe_endpoint(settings)
    # Only now the env's stack (verifiers, openai, datasets): every argument above was checked without it.
    import asyncio

    from rich.console import Console

    from air.runs.run_disk import disk_fault, stopped_by_disk
    from air.runs.run_log import console_lines
    from air.runs.standalone import run_standalone
    from air.runs.standalone_view import StandaloneProgress
    from air.sandbox.errors import SandboxesUnavailable

    console = _fit_to_output(Console())
    view = StandaloneProgress(console, settings, folder.path)
    try:
        with console_lines(), view:
            summary = asyncio.run(
                run_standalone(
                    settings,
                    on_step=view.step_done,
                    on_rollout=view.rollout_done,
                    loggers=loggers,
                    folder=folder,
                    on_start=view.start,
                )
            )
    except SandboxesUnavailable as exc:  # the run stopped: its summary says how far it got
        _print_stopped(console, settings, folder.path)
        raise CommandError(str(exc)) from exc
    except (ValueError, RuntimeError) as exc:  # bad env args, unknown task, no Docker, bad policy spec
        raise CommandError(str(exc)) from exc
    except OSError as exc:  # the disk under the run's folder filled (or failed): one line, its files whole
        fault = disk_fault(exc)
        if fault is None:
            raise
        raise CommandError(stopped_by_disk(folder.path, fault, settings.steps)) from None
    if summary["status"] == "interrupted":  # Ctrl-C: the rollouts in flight recorded, the summary written
        from air.runs.standalone_view import print_interrupted

        print_interrupted(console, summary)
        raise KeyboardInterrupt
    view.print_summary(summary)
    # Exit status (docs/standalone.md): 0 when every step ran and some rollout was not masked; 1 otherwise.
    return 0 if summary["masked"] < summary["rollouts"] else 1


def _check_before_start(settings: StandaloneSettings) -> None:
    """The env id, its arguments and the task names, checked without the env's stack: a typo in seconds."""
    from air.runs.standalone_checks import StandaloneCheckError, check_before_start

    try:
        check_before_start(settings)
    except StandaloneCheckError as exc:
        raise CommandError(str(exc)) from None


def _claim_folder_and_probe_endpoint(settings: StandaloneSettings) -> RunFolder:
    """The run's folder, claimed and found writable with room left; then the model endpoint asked once; then
    the Docker engine. Any failing is one line before any container starts, and leaves no folder behind."""
    import os

    from air.runs.endpoint_probe import EndpointError, probe_endpoint
    from air.runs.run_disk import claim_checked
    from air.runs.run_folder import RunFolderError

    try:
        folder = claim_checked(settings.open_run_folder, settings.output_dir)
    except RunFolderError as exc:
        raise CommandError(str(exc)) from None
    if settings.base_url is not None:
        key = os.environ.get(settings.api_key_var, "EMPTY")  # as the run's client reads it
        try:
            probe_endpoint(settings.base_url, key, settings.model or "default", settings.api_key_var)
        except EndpointError as exc:
            folder.discard()
            raise CommandError(str(exc)) from None
    if settings.env != "simple_env":  # its rollouts run in containers: no engine is one line now, not a wait
        from air.sandbox.engine import require_engine  # the docker SDK: only once the cheap checks passed
        from air.sandbox.errors import EngineAbsent

        try:
            require_engine()
        except EngineAbsent as exc:
            folder.discard()
            raise CommandError(f"air standalone: {exc}") from None
    return folder


def _fit_to_output(console: Console) -> Console:
    from air.cli.console import fit_to_output  # piped: whole lines, tables as wide as they need

    return fit_to_output(console)


def require_classic_front(command: str) -> None:
    """Standalone and replay drive the classic front: under verifiers 0.3+ say so, before anything loads."""
    from air.env.generations import classic_only, installed_front

    if installed_front() == "v1":
        raise CommandError(classic_only(f"`{command}`"))


def _print_stopped(console: Console, settings: StandaloneSettings, folder: Path) -> None:
    from air.runs.standalone_view import print_masked

    path = folder / "summary.json"
    try:
        summary = json.loads(path.read_text())
    except (OSError, ValueError):
        return  # it recorded nothing, and its folder was removed
    console.print(f"stopped after {summary['steps_run']} of {settings.steps} steps; summary in {path}")
    print_masked(console, summary)
