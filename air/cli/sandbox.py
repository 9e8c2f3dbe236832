"""``air build-image``: the sandbox image."""

from __future__ import annotations

import argparse

from air.cli.errors import CommandError


def register_build_image(subparsers: argparse._SubParsersAction) -> None:
    from air.sandbox.image.recipe import BASE_MODES

    parser = subparsers.add_parser(
        "build-image",
        help="build the sandbox image (air-sandbox:<recipe hash>) if it is missing",
        description=cmd_build_image.__doc__,
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
    parser.add_argument(
        "--from",
        dest="source",
        metavar="IMAGE",
        help=(
            "derive an image for evaluation from IMAGE with MLGym's layout (aigym/mlgym-agent): its conda env "
            "moved where the agent cannot write (air-prepared:<IMAGE id>-<recipe hash>); offline, once per IMAGE"
        ),
    )
    parser.add_argument("--force", action="store_true", help="rebuild (without cache) even if the tag exists")
    parser.add_argument("--tag-only", action="store_true", help="print the tag the current recipe hashes to and exit")
    parser.add_argument("-v", "--verbose", action="store_true", help="print every build output line")
    parser.set_defaults(func=cmd_build_image)


def cmd_build_image(args: argparse.Namespace) -> int:
    """Build the Docker image agent rollouts run in, from the recipe in docker/. The tag is air-sandbox:<hash of
    the recipe>; nothing is done when it already exists. Progress goes to stderr; the tag is printed on
    stdout. With --from IMAGE: the image for evaluation derived from IMAGE (MLGym's), see docs/sandbox.md."""
    from air.sandbox.image.build import build_image
    from air.sandbox.image.progress import RichProgress
    from air.sandbox.image.recipe import AirImageError, default_image_tag

    try:
        if args.source:
            return _prepared(args)
        if args.tag_only:
            print(default_image_tag())
            return 0
        result = build_image(base=args.base, force=args.force, progress=RichProgress(verbose=args.verbose))
    except AirImageError as exc:
        raise CommandError(str(exc)) from exc
    print(result.tag)
    return 0


def _prepared(args: argparse.Namespace) -> int:
    from air.sandbox.image.base import get_client
    from air.sandbox.image.prepared import build_prepared, prepared_tag
    from air.sandbox.image.progress import RichProgress

    if args.tag_only:
        print(prepared_tag(get_client(), args.source)[0])
        return 0
    result = build_prepared(args.source, force=args.force, progress=RichProgress(verbose=args.verbose))
    print(result.tag)
    return 0
