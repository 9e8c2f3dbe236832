"""What a user asks of ``air rehearse`` (the command line's options, typed). A light module of its own: every
step of the rehearsal takes it, and it imports nothing of the rehearsal."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class RehearsalSettings:
    config: Path
    steps: int = 3
    prime_rl: str | None = None
    policy: str = "noisy"
    output: Path | None = None
    model_dir: Path | None = None
    timeout_s: float = 1800.0
    seed: int = 0
    external_env_servers: dict[str, str] = field(default_factory=dict)  # v1: source name -> serve.address
    env_nodes: dict[str, Path] = field(default_factory=dict)  # v1: source name -> its fleet folder (air/fleet)
    node_lost_after_s: float = 10.0  # the spreader's bound for a lost env node
    trainer: bool = False  # prime-rl's own trainer instead of the stand-in (live_trainer)
