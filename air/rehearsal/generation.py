"""What the rehearsal asks of one generation of prime-rl: a small protocol, implemented by
:class:`air.rehearsal.classic.generation.Classic` (c87c19b: its orchestrator and env workers in one process
tree) and :class:`air.rehearsal.v1.generation.V1` (today's: env servers, an orchestrator, a trainer).

:func:`air.rehearsal.rehearse.rehearse` runs the same steps for both, in this order: ``plan`` the config
(and refuse what a CPU run cannot honour), ``check`` what it needs here, ``derive`` prime-rl's configs in its
venv, ``launch`` its processes until the steps are done, ``read`` back the batches, and the generation's
``report_fields``. Finding prime-rl, the model, the server it samples from, the trainer's config and the
report itself are shared.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, TypeVar

from air.rehearsal.figures import BatchFigures
from air.rehearsal.live_trainer import TrainedSample
from air.rehearsal.settings import RehearsalSettings

Say = Callable[[str, int, int], None]  # progress: (what, done, total)


class Served(Protocol):
    """What the orchestrator samples from (air.serving.server.PolicyServer, or prime-rl's vLLM:
    air.serving.prime_rl_vllm.PrimeRlVllm): its OpenAI base URL, the model's name there, and what its weight
    routes were asked (filled while the rehearsal runs)."""

    base_url: str
    model_name: str
    weight_updates: list[Any]


class Plan(Protocol):
    """A config read for what the rehearsal must know (prime-rl validates it later, in its venv)."""

    @property
    def path(self) -> Path: ...
    @property
    def group_size(self) -> int: ...
    @property
    def batch_size(self) -> int | None: ...
    @property
    def max_model_len(self) -> int | None: ...
    @property
    def dropped(self) -> list[str]: ...


PlanT = TypeVar("PlanT", bound=Plan)


@dataclass
class Rehearsal:
    """One rehearsal's fixed parts, which every step of a generation is given."""

    settings: RehearsalSettings
    python: Path  # prime-rl's venv
    out: Path  # the rehearsal's output folder
    model_dir: Path  # the tiny model
    say: Say
    env_args: dict[str, Any]  # given to every env: its trajectories into the rehearsal's folder, the run's id


@dataclass
class Derived:
    """What a generation derived from the config in prime-rl's venv: what its processes start from, and
    where the orchestrator and the trainer meet."""

    orchestrator_config: Path
    run_dir: Path  # rollouts/ and broadcasts/
    trainer_source: Path  # what prime-rl's trainer config is derived from (--trainer)
    trainer_output_dir: Path  # the output folder the trainer is given, as rl gives it
    ranks: int = 1  # the trainer's data ranks (v1: a batch file per rank)


@dataclass
class ReadBack:
    """The batches read back: their figures, and every sample as the trainer trains on it."""

    figures: BatchFigures
    trained: list[TrainedSample]


class Generation(Protocol[PlanT]):
    name: str  # "classic" or "v1", as air.launch.config_v1.detect_generation says

    def plan(self, path: Path, raw: dict[str, Any], settings: RehearsalSettings) -> PlanT: ...

    def check(self, plan: PlanT) -> None:
        """Docker, the image, envs that load: named before anything starts."""

    def derive(self, rehearsal: Rehearsal, plan: PlanT, server: Served, batch_size: int | None) -> Derived:
        """prime-rl's configs for the rehearsal (``batch_size``: the orchestrator's, where the CPU trainer
        cuts it)."""

    def launch(
        self, rehearsal: Rehearsal, plan: PlanT, derived: Derived, trainer_config: Path | None, weight_updates: list
    ) -> list[dict[str, Any]]:
        """prime-rl's processes until the steps are done, then stopped whatever happens; the env servers
        (v1: per source, its address and who started it)."""

    def read(self, rehearsal: Rehearsal, plan: PlanT, derived: Derived) -> ReadBack: ...

    def report_fields(
        self, rehearsal: Rehearsal, plan: PlanT, derived: Derived, read_back: ReadBack, servers: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The report's fields only this generation knows (its metrics, its strategy, its env servers)."""
