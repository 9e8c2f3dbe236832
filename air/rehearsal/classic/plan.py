"""A config for prime-rl c87c19b (classic), read for what the rehearsal must know or cannot honour (prime-rl's
own validation comes later, in its venv).

Changed from the config, and only this: the client points at the scripted server, ``model.name`` at the tiny
model, ``max_steps`` is ``--steps``, outputs go to the rehearsal's folder (trajectories too), and what needs a
network or a trainer is dropped (W&B: metrics are captured locally instead; prime's monitor; checkpoints;
evals; ``env_gpu``). Refused with the reason: NCCL weight broadcast, a teacher model, env ids that prime-rl
would install from the hub.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from air.rehearsal.checks import read_config
from air.rehearsal.errors import RehearsalError

DROPPED = ("wandb", "prime_monitor", "ckpt", "eval", "heartbeat")
ENV_DROPPED = ("env_gpu",)  # task containers run without GPUs here; the data path is the same


@dataclass
class PlannedConfig:
    path: Path
    strategy: str
    group_size: int
    batch_size: int
    max_model_len: int | None
    dropped: list[str]
    envs: list[dict[str, Any]]

    @property
    def env_images(self) -> list[str]:
        """The images the envs name ("" for the recipe's tag)."""
        return sorted({str(env.get("args", {}).get("image") or "") for env in self.envs})


def plan_config(path: Path, raw: dict[str, Any] | None = None) -> PlannedConfig:
    """Read the combined config for what the rehearsal must know or cannot honour (prime-rl's own
    validation comes later, in its venv)."""
    raw = read_config(path) if raw is None else raw
    orchestrator = raw.get("orchestrator", {})
    if orchestrator.get("teacher_model") or raw.get("teacher_model"):
        raise RehearsalError(f"{path}: a teacher model needs a second inference server; the rehearsal has none")
    broadcast = raw.get("weight_broadcast", {}).get("type") or orchestrator.get("weight_broadcast", {}).get("type")
    if broadcast == "nccl":
        raise RehearsalError(f"{path}: weight_broadcast type 'nccl' needs GPUs; use 'filesystem' to rehearse")
    transport = orchestrator.get("rollout_transport", {}).get("type", "filesystem")
    if transport != "filesystem":
        raise RehearsalError(f"{path}: rollout_transport {transport!r}: the stand-in trainer reads batches from files")
    envs = orchestrator.get("env", [])
    if not envs:
        raise RehearsalError(f"{path}: no [[orchestrator.env]]: nothing to rehearse")
    hub_ids = [env.get("id", "") for env in envs if "/" in env.get("id", "")]
    if hub_ids:
        raise RehearsalError(
            f"{path}: env ids {hub_ids} would be installed from the Prime hub; the rehearsal is offline"
        )
    dropped = [key for key in DROPPED if key in raw or key in orchestrator]
    dropped += sorted(
        {f"env_gpu of {env.get('name', env.get('id'))}" for env in envs if env.get("args", {}).get("env_gpu")}
    )
    return PlannedConfig(
        path=path,
        strategy=orchestrator.get("trajectory_strategy", "interleaved"),
        group_size=int(orchestrator.get("rollouts_per_example", 1)),
        batch_size=int(orchestrator.get("batch_size", 128)),
        max_model_len=raw.get("max_model_len") or raw.get("seq_len") or orchestrator.get("seq_len"),
        dropped=dropped,
        envs=envs,
    )
