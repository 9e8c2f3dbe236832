"""``air fleet overlay DIR --config rl.toml --source NAME``: what turns a run of today's prime-rl into one
over env nodes, as a TOML to put last:
``rl @ rl.toml @ slurm.toml @ FOLDER/rl-overlay.toml``.

Two things, both prime-rl's own config: the source's ``serve.address`` (loopback on the orchestrator's node,
where the spreader listens; prime-rl then starts no env server for it), and ``[slurm] pre_run_command``, the
one place prime-rl's Slurm templates run a command of the user's. That command starts the spreader as a job
step on the orchestrator's node (``$ORCH_ADDR`` in the multi-node template; the only node in the single-node
one), after a pause: the multi-node template's clean-up, which runs after ``pre_run_command``, kills
processes whose command line names ``prime_rl``, ``vllm`` or ``torchrun``; the orchestrator waits up to 600 s
for its env server to answer, so the pause costs nothing. A TOML array replaces the one before it, so the
overlay repeats every source of the config, the spread one with its address set.
"""

from __future__ import annotations

import copy
import re
import shlex
import sys
from pathlib import Path

import tomli_w

from air.fleet.errors import FleetError
from air.fleet.folder import FleetFolder, write_atomic
from air.launch.config_files import ConfigLoadError, load_config

# What the multi-node template's clean-up kills by command line (prime-rl 559b447, multi_node_rl.sbatch.j2).
CLEANUP_PATTERNS = ("prime_rl", "torchrun", "vllm", "pd-sidecar", "mooncake")
START_DELAY_S = 30


def spreader_command(
    folder: FleetFolder, source: str, port: int, *, delay_s: float = START_DELAY_S, options: tuple[str, ...] = ()
) -> str:
    """The pre_run_command: the spreader as a step on the orchestrator's node, in the background."""
    spread = [sys.executable, "-m", "air.cli.main", "fleet", "spread", str(folder.root)]
    spread += ["--address", f"tcp://127.0.0.1:{port}", "--source", source, *options]
    line = shlex.join(spread)
    caught = [pattern for pattern in CLEANUP_PATTERNS if re.search(re.escape(pattern), line)]
    if caught:
        raise FleetError(
            f"the spreader's command line holds {', '.join(caught)}, which prime-rl's Slurm clean-up kills by name:"
            f" {line}. Put the fleet folder and this venv on paths without it"
        )
    log = shlex.quote(str(folder.logs("spreader") / f"{source}.log"))
    step = 'srun --overlap --nodes=1 --ntasks=1 --nodelist="${ORCH_ADDR:-$SLURMD_NODENAME}" --job-name=air-spreader'
    return f"mkdir -p {shlex.quote(str(folder.logs('spreader')))}; ( sleep {delay_s:g}; {step} {line} ) > {log} 2>&1 &"


def write_overlay(
    folder: FleetFolder, config: Path, source: str, port: int, spread_options: tuple[str, ...] = ()
) -> Path:
    try:
        loaded = load_config(config)
    except ConfigLoadError as exc:
        raise FleetError(str(exc)) from exc
    sources = (((loaded.data.get("orchestrator") or {}).get("train") or {}).get("source")) or []
    names = [entry.get("name") for entry in sources]
    if source not in names:
        raise FleetError(
            f"{config} has no train source {source!r}; its sources: {', '.join(map(str, names)) or 'none'}"
        )
    spread = copy.deepcopy(sources)
    for entry in spread:
        if entry.get("name") == source:
            entry.setdefault("serve", {})["address"] = f"tcp://127.0.0.1:{port}"
    overlay = {
        "slurm": {"pre_run_command": spreader_command(folder, source, port, options=spread_options)},
        "orchestrator": {"train": {"source": spread}},
    }
    path = folder.root / "rl-overlay.toml"
    header = (
        f"# Written by air.fleet.overlay for {config} (source {source!r} over the env nodes of {folder.root}).\n"
        f"# Put it last: rl @ {config} @ <your slurm.toml> @ {path}\n"
    )
    write_atomic(path, header + tomli_w.dumps(overlay))
    return path
