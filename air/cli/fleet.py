"""``air fleet``: env nodes past one machine (docs/scaling.md).

air fleet init DIR --config rl.toml [--source NAME]   the fleet folder: keys, the env the nodes serve
air fleet node DIR                                    one env node (a Slurm job step runs it per node)
air fleet spread DIR --address tcp://127.0.0.1:PORT   the source's one address, beside the orchestrator
air fleet status DIR                                  the nodes recorded, each spreader's figures
air fleet submit DIR --nodes 4 [sbatch options]       the env nodes as one Slurm job (see air.fleet.slurm)
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import shlex
from pathlib import Path

from air.cli.errors import CommandError
from air.cli.help import DefaultsHelpFormatter
from air.cli.options import add_model_options, flag_of, settings_from_args
from air.fleet.settings import SpreadSettings
from air.sandbox.neutral import log_to_stderr

OVERLAY_FIELDS = ("lost_after_s", "probe_interval_s")  # the spreader's options an overlay may set


def register_fleet(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "fleet",
        help="env nodes on many machines (Slurm): init, node, spread, overlay, status, submit",
        description="Env nodes past one machine (docs/scaling.md): a source's episodes over env servers on many "
        "nodes, each its own Docker engine, behind CURVE-secured gates and one spreader.",
    )
    commands = parser.add_subparsers(dest="fleet_command", metavar="COMMAND", required=True, help="what to do")

    init = commands.add_parser(
        "init", help="make a fleet folder: the run's keys and the env its nodes serve", description=cmd_init.__doc__
    )
    init.add_argument("folder", type=Path, help="on storage every node and the orchestrator's node share")
    init.add_argument("--config", type=Path, required=True, help="today's prime-rl rl TOML (configs/mlgym-v1/)")
    init.add_argument("--source", help="the source whose env the nodes serve (default: the only train source)")
    init.set_defaults(func=cmd_init)

    node = commands.add_parser(
        "node", help="serve the fleet's env on this node, behind its gate", description=cmd_node.__doc__
    )
    node.add_argument("folder", type=Path)
    node.add_argument("--name", help="default: $SLURMD_NODENAME, else the host name")
    # No defaults here: an option left out leaves NodeOptions' own (the help says which in words).
    node.add_argument("--host", help="the address other nodes reach this one at (default: host name)")
    node.add_argument("--bind", help="the interface the gate listens on (default: all)")
    node.add_argument("--port", type=int, help="default: a free port")
    node.add_argument("--capacity", type=int, help="episodes at once (default: the env's pool_size)")
    node.add_argument("--no-docker", action="store_true", help="the env server needs no Docker engine")
    node.add_argument("--server-command", help="the env server to run (default: python -m air.env.v1_serve)")
    node.set_defaults(func=cmd_node)

    spread = commands.add_parser(
        "spread",
        help="one address for a source, its episodes spread over the nodes",
        description=cmd_spread.__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    spread.add_argument("folder", type=Path)
    spread.add_argument("--address", required=True, help="where the orchestrator connects: the source's serve.address")
    spread.add_argument("--source", default="train", help="names its figures file")
    add_model_options(spread, SpreadSettings)
    spread.set_defaults(func=cmd_spread)

    overlay = commands.add_parser(
        "overlay",
        help="a TOML to put last on `rl @ ...`: the source over the env nodes",
        description=cmd_overlay.__doc__,
        formatter_class=DefaultsHelpFormatter,
    )
    overlay.add_argument("folder", type=Path)
    overlay.add_argument("--config", type=Path, required=True, help="today's prime-rl rl TOML")
    overlay.add_argument("--source", required=True, help="the train source whose episodes go to the env nodes")
    overlay.add_argument("--port", type=int, default=5950, help="the spreader's loopback port")
    add_model_options(overlay, SpreadSettings, only=OVERLAY_FIELDS, unset="the spreader's own")
    overlay.set_defaults(func=cmd_overlay)

    status = commands.add_parser(
        "status", help="the nodes recorded and each spreader's figures", description=cmd_status.__doc__
    )
    status.add_argument("folder", type=Path)
    status.set_defaults(func=cmd_status)

    from air.cli.fleet_submit import register_submit

    register_submit(commands)


def _folder(path: Path):
    from air.fleet.folder import FleetFolder

    return FleetFolder(path)


def cmd_init(args: argparse.Namespace) -> int:
    """Make the fleet folder: the run's CURVE keys (owner-only) and env.json, the source's [env] table."""
    from air.fleet.errors import FleetError
    from air.fleet.source_env import source_env

    try:
        env = source_env(args.config, args.source)
        folder = _folder(args.folder)
        folder.create(env)
    except FleetError as exc:
        raise CommandError(str(exc)) from exc
    print(f"fleet folder {folder.root}: env {env['taskset']['id']!r}, keys in {folder.keys} (owner-only)")
    return 0


def _logging() -> None:
    log_to_stderr(logging.INFO)  # an env node's lines may quote its containers


def cmd_node(args: argparse.Namespace) -> int:
    """Serve the fleet's env on this node until stopped: its engine checked, its last start's leftovers removed,
    the image checked or built, the env server behind the gate (CURVE: the run's key only), its record written."""
    from air.fleet.errors import FleetError
    from air.fleet.node import NodeOptions, serve_node

    _logging()
    given = {name: getattr(args, name) for name in ("name", "host", "bind", "port") if getattr(args, name) is not None}
    options = NodeOptions(
        folder=_folder(args.folder),
        capacity=args.capacity,
        docker=not args.no_docker,
        server_command=shlex.split(args.server_command) if args.server_command else None,
        **given,
    )
    try:
        return serve_node(options)
    except FleetError as exc:
        raise CommandError(str(exc)) from exc


def cmd_spread(args: argparse.Namespace) -> int:
    """Listen where the orchestrator connects and hand each episode to the least busy env node with room; a node
    silent for --lost-after has its episodes failed at once, and rejoins when it answers again. The address is
    held by a relay that starts the spreader again, its episodes in flight answered as failed, should it die."""
    from air.fleet.errors import FleetError
    from air.fleet.front import Front

    _logging()
    settings = settings_from_args(SpreadSettings, args, command="air fleet spread")
    try:
        front = Front(_folder(args.folder), args.address, args.source, settings)
    except FleetError as exc:
        raise CommandError(str(exc)) from exc
    return asyncio.run(front.run())


def cmd_overlay(args: argparse.Namespace) -> int:
    """Write FOLDER/rl-overlay.toml: the source's serve.address and the spreader's start (air.fleet.overlay)."""
    from air.fleet.errors import FleetError
    from air.fleet.overlay import write_overlay

    # Checked now (the spreader's own defaults for the rest), not on the orchestrator's node once the job runs.
    settings_from_args(SpreadSettings, args, only=OVERLAY_FIELDS, command="air fleet overlay")
    given = [name for name in OVERLAY_FIELDS if getattr(args, name) is not None]
    options = tuple(f"{flag_of(SpreadSettings, name)}={getattr(args, name):g}" for name in given)
    try:
        path = write_overlay(_folder(args.folder), args.config, args.source, args.port, options)
    except FleetError as exc:
        raise CommandError(str(exc)) from exc
    print(f"wrote {path}: rl @ {args.config} @ <your slurm.toml> @ {path}")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """The env nodes recorded in the fleet folder and each spreader's last figures per node."""
    folder = _folder(args.folder)
    records = folder.records()
    print(f"{len(records)} env nodes recorded in {folder.nodes}")
    for record in records.values():
        print(f"  {record.name}: {record.address}, {record.capacity} at once, GPUs {record.gpus or 'none'}")
    for figures in folder.all_figures():
        line = f"source {figures['source']} at {figures['address']}: {figures['waiting']} waiting"
        if figures.get("spreader_starts", 1) > 1:  # its relay started it again after a death
            deaths = figures.get("failed_by_spreader_deaths", 0)
            line += f"; spreader started {figures['spreader_starts']} times ({deaths} episodes failed by its deaths)"
        print(line)
        for name, node in figures["nodes"].items():
            print(
                f"  {name}: {node['state']}, {node['running']} running, {node['done']} done, {node['failed']} failed,"
                f" {node['warm_containers']} warm of {node.get('containers')} containers"
            )
    return 0
