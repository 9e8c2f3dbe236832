"""The original project's command, kept for its users: ``python -m air.prime_orchestrator`` runs ``air standalone``.

    python -m air.prime_orchestrator --task battleOfSexes --model NAME --num-steps 10 \
        --batch-size 16 --output-dir DIR [--base-url http://localhost:8000/v1]

It ran GRPO-style steps of MLGym tasks against a model served by hand (a vLLM server at
``--base-url``). It is ``air standalone`` now, with the same meaning: the model at ``--base-url``
plays, rollouts and ``summary.json`` land in ``--output-dir``, and the task root comes from
``--task-root``, else $MLGYM_ROOT, else $MLGYM_CONFIG_ROOT (the original guide's ``<MLGym>/configs``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from air.cli.main import main as air_main

DEFAULT_BASE_URL = "http://localhost:8000/v1"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m air.prime_orchestrator",
        description="The original standalone command: steps of rollouts against a served model "
        "(the same as `air standalone --base-url URL --model NAME`).",
    )
    parser.add_argument("--task", action="append", required=True, help="an MLGym task (repeatable)")
    parser.add_argument("--model", required=True, help="the model name the server at --base-url serves")
    parser.add_argument("--base-url", default=DEFAULT_BASE_URL, help=f"OpenAI-compatible endpoint ({DEFAULT_BASE_URL})")
    parser.add_argument("--num-steps", type=int, default=10, help="steps (default: 10)")
    parser.add_argument("--batch-size", type=int, default=16, help="rollouts per step (default: 16)")
    parser.add_argument("--rollouts-per-example", type=int, default=4, help="group size (default: 4)")
    parser.add_argument("--max-turns", type=int, default=10)
    parser.add_argument("--output-dir", help="where rollouts and summary.json go (default: outputs/standalone/<time>)")
    parser.add_argument("--task-root", help="MLGym checkout (default: $MLGYM_ROOT, else $MLGYM_CONFIG_ROOT/..)")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int)
    return parser


def standalone_argv(args: argparse.Namespace) -> list[str]:
    """The ``air standalone`` arguments that mean the same run."""
    argv = ["standalone", "--base-url", args.base_url, "--model", args.model]
    for task in args.task:
        argv += ["--task", task]
    argv += ["--steps", str(args.num_steps), "--batch-size", str(args.batch_size)]
    argv += ["--rollouts-per-example", str(args.rollouts_per_example), "--max-turns", str(args.max_turns)]
    argv += ["--temperature", str(args.temperature)]
    for flag, value in (("--output-dir", args.output_dir), ("--task-root", args.task_root)):
        if value:
            argv += [flag, value]
    if args.max_tokens:
        argv += ["--max-tokens", str(args.max_tokens)]
    return argv


def main(argv: Sequence[str] | None = None) -> int:
    return air_main(standalone_argv(build_parser().parse_args(argv)))


if __name__ == "__main__":
    sys.exit(main())
