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

from pydantic import BaseModel, Field

from air.fleet.errors import FleetError
from air.fleet.folder import FleetFolder, write_atomic


class SlurmJob(BaseModel):
    nodes: int = Field(ge=1)
    partition: str | None = None
    gpus_per_node: int | None = Field(None, ge=0)
    time: str | None = None  # sbatch --time
    restart_delay_s: float = Field(5.0, ge=0)
    sbatch_args: list[str] = []  # anything else, one sbatch option each
    node_args: list[str] = []  # passed to each env node (`air fleet node DIR ...`)


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
