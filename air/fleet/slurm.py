"""The env nodes as one Slurm job (``air fleet submit DIR --nodes 4``): a job step per node, each restarted
when it ends.

A step per node (not one step over all nodes) so that cancelling one (``scancel JOB.STEP``) or losing its
node ends only that node's env server; the loop on the batch host starts it again after a pause, and the new
start removes what the old one left on the node's engine, then rejoins (air.fleet.node). Every node runs the
same ``air`` as the submitting host (a venv on shared storage), against its own Docker engine.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from air.fleet.errors import FleetError

if TYPE_CHECKING:  # the folder's module loads zmq: not for `air --help`, which builds its options from SlurmJob
    from air.fleet.folder import FleetFolder


class SlurmJob(BaseModel):
    """What ``air fleet submit DIR --nodes 4`` asks for: air.cli.options makes its options of these fields."""

    nodes: int = Field(ge=1, description="how many env nodes")
    partition: str | None = Field(None, description="sbatch --partition")
    gpus_per_node: int | None = Field(None, ge=0, description="GPUs per env node, given to its tasks' containers")
    time: str | None = Field(None, description="sbatch --time")
    restart_delay_s: float = Field(
        5.0,
        ge=0,
        description="seconds before a node's ended step restarts",
        json_schema_extra={"flag": "--restart-delay"},
    )
    sbatch_args: list[str] = Field(
        [], description="another sbatch option (repeatable)", json_schema_extra={"flag": "--sbatch-arg"}
    )
    # One string on the command line (--node-args '--capacity 8'), split there: not a generated option.
    node_args: list[str] = Field([], description="passed to each env node", json_schema_extra={"cli": False})


def render(folder: FleetFolder, job: SlurmJob, air: list[str] | None = None) -> str:
    air = air or [sys.executable, "-m", "air.cli.main"]
    header = [f"--job-name=air-env-nodes-{folder.root.name}", f"--nodes={job.nodes}", "--ntasks-per-node=1"]
    header.append(f"--output={folder.root / 'logs' / 'slurm-%j.out'}")
    if job.partition:
        header.append(f"--partition={job.partition}")
    if job.gpus_per_node:
        header.append(f"--gpus-per-node={job.gpus_per_node}")
    if job.time:
        header.append(f"--time={job.time}")
    header += job.sbatch_args
    gpus = f" --gpus={job.gpus_per_node}" if job.gpus_per_node else ""
    node = shlex.join([*air, "fleet", "node", str(folder.root), *job.node_args])
    lines = ["#!/usr/bin/env bash", *(f"#SBATCH {shlex.quote(option)}" for option in header)]
    lines += [
        "# Written by air.fleet.slurm: one env node per Slurm node, each its own job step.",
        "set -u",
        'for node in $(scontrol show hostnames "$SLURM_JOB_NODELIST"); do',
        "    (",
        "        while true; do",
        f'            srun --nodes=1 --ntasks=1 --nodelist="$node" --job-name="env-node-$node"{gpus} \\',
        f'                {node} --name "$node"',
        f'            echo "env node $node: its step ended (exit $?); again in {job.restart_delay_s:g} s" >&2',
        f"            sleep {job.restart_delay_s:g}",
        "        done",
        "    ) &",
        "done",
        "wait",
    ]
    return "\n".join(lines) + "\n"


def submit(folder: FleetFolder, job: SlurmJob, dry_run: bool = False) -> tuple[Path, str | None]:
    """Write FOLDER/env-nodes.sbatch; unless ``dry_run``, submit it. Returns the script and the job id."""
    from air.fleet.folder import write_atomic

    folder.env_config()  # a folder `air fleet init DIR --config rl.toml` made, or stop here rather than on every node
    folder.key_pair("node")
    script = folder.root / "env-nodes.sbatch"
    write_atomic(script, render(folder, job), mode=0o755)
    if dry_run:
        return script, None
    try:
        done = subprocess.run(["sbatch", "--parsable", str(script)], capture_output=True, text=True, timeout=60)
    except FileNotFoundError as exc:
        raise FleetError("sbatch not found: run this on a host of your Slurm cluster") from exc
    if done.returncode != 0:
        raise FleetError(f"sbatch refused {script}: {done.stderr.strip() or done.stdout.strip()}")
    return script, done.stdout.strip().split(";")[0]
