"""Weights & Biases logging for ``air standalone --wandb``.

Per step, the numbers of ``air.runs.standalone.step_statistics`` go to the W&B history as
``standalone/<name>`` at W&B step = the standalone step. A ``samples`` table shows a bounded
sample of rollouts (the first group of each step, at most ``max_sample_rows`` rows), read from the
rollout outputs and, where air_mlgym saved one, the rollout's trajectory file; a value a rollout
does not report (e.g. ``exit_status`` on simple_env) is None. The run config is the
``StandaloneSettings``; the run summary gets ``summary/<name>`` from ``summary.json``.

wandb's own environment variables apply (WANDB_MODE, WANDB_PROJECT, WANDB_NAME, WANDB_ENTITY,
WANDB_DIR, ...). Without WANDB_DIR, wandb's files go under the standalone output dir.

The agent's text in the table (commands, causes) goes as ``air.sandbox.neutral`` shows it: no control
characters, cut to length.

W&B is a copy: if it fails (no API key, a network error), a warning is logged, W&B logging stops,
and the run and its own files (steps.jsonl, summary.json) go on.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from types import ModuleType
from typing import Any

from pydantic import BaseModel

from air.env.actions import message_text, parse_action
from air.env.metrics import metric_value, task_name_of
from air.env.trajectories import TrajectoryError, TrajectoryRecord
from air.env.trajectory_reader import load_trajectory, recorded_commands
from air.runs.standalone import StandaloneSettings, group_advantages, masked_cause
from air.sandbox.neutral import neutral

log = logging.getLogger(__name__)

DEFAULT_PROJECT = "air-agent"
PREFIX = "standalone/"
TABLE_KEY = "samples"
MAX_COMMANDS_CHARS = 2000
INSTALL_HINT = "pip install 'air-mlgym[wandb]'"


class WandbUnavailable(RuntimeError):
    """wandb is not installed: raised when the logger is made, before any rollout runs."""


def require_wandb() -> ModuleType:
    try:
        import wandb
    except ImportError as exc:
        raise WandbUnavailable(f"W&B logging needs the wandb package: {INSTALL_HINT} ({exc})") from exc
    return wandb


class SampleRow(BaseModel):
    """One row of the samples table: one rollout, as its output and trajectory file report it."""

    step: int | None
    group_id: str | None
    example_id: int | None
    task: str | None
    policy: str | None
    reward: float | None
    advantage: float | None  # None for a masked rollout (prime-rl drops it)
    baseline_score: float | None
    best_score: float | None
    final_score: float | None
    turns: int | None
    validates: int | None
    exit_status: str | None  # from the trajectory file (air_mlgym); None without one
    stop_condition: str | None  # verifiers' reason the rollout stopped
    error: str | None  # why the rollout was masked
    commands: str | None
    trajectory: str | None


SAMPLE_COLUMNS = list(SampleRow.model_fields)


def sample_rows(outputs: list[dict[str, Any]]) -> list[SampleRow]:
    """The rows of one group's rollouts; advantages as ``step_statistics`` computes them."""
    kept = [i for i, o in enumerate(outputs) if not o.get("error")]
    advantages = dict(zip(kept, group_advantages([float(outputs[i].get("reward") or 0.0) for i in kept]), strict=True))
    return [_row(o, advantages.get(i)) for i, o in enumerate(outputs)]


def _row(output: dict[str, Any], advantage: float | None) -> SampleRow:
    info = output.get("info") or {}
    task = task_name_of(output) or None
    error = output.get("error")
    path = output.get("trajectory_path")
    record = _load_record(path)
    if record is not None:
        commands: list[str] | None = recorded_commands(record)
    else:
        commands = _commands_of(output.get("completion"))

    def metric(name: str) -> Any:
        # Envs serving several tasks leave raw scores to the trajectory file.
        found = metric_value(output.get("metrics") or {}, name, task)
        return found if found is not None or record is None else record.metrics.get(name)

    return SampleRow(
        step=info.get("step"),
        group_id=info.get("group_id"),
        example_id=output.get("example_id"),
        task=task,
        policy=info.get("policy"),
        reward=output.get("reward"),
        advantage=advantage,
        baseline_score=metric("baseline_score"),
        best_score=metric("best_score"),
        final_score=metric("final_score"),
        turns=_int(metric("turns")),
        validates=_int(metric("validates")),
        exit_status=record.exit_status if record is not None else None,
        stop_condition=output.get("stop_condition"),
        error=neutral(masked_cause(error)) if error else None,
        commands=_join(commands),
        trajectory=path,
    )


def _load_record(path: str | None) -> TrajectoryRecord | None:
    if not path:
        return None
    try:
        return load_trajectory(path)
    except (TrajectoryError, OSError) as exc:
        log.warning("W&B samples table: cannot read trajectory %s: %s", path, exc)
        return None


def _commands_of(completion: Any) -> list[str] | None:
    """The commands of the model's replies, read with the env's parser (used when no trajectory file)."""
    if not isinstance(completion, list):
        return None
    replies = [m for m in completion if isinstance(m, dict) and m.get("role") == "assistant"]
    commands = [parse_action(message_text(m)).command for m in replies]
    return [c for c in commands if c]


def _join(commands: list[str] | None) -> str | None:
    if commands is None:
        return None
    return neutral("\n".join(f"$ {c}" for c in commands), lines=True, limit=MAX_COMMANDS_CHARS)


def _int(value: Any) -> int | None:
    return None if value is None else int(value)


class WandbStepLogger:
    """A ``StepLogger`` for ``run_standalone``: steps, a samples table, config and summary to W&B."""

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        *,
        table_every: int = 0,
        sample_groups_per_step: int = 1,
        max_sample_rows: int = 64,
    ) -> None:
        """``table_every``: also log the samples table every N steps (0: only at the end)."""
        self._wandb = require_wandb()  # here, so a missing wandb stops the command before any rollout
        self.project = project
        self.name = name
        self.table_every = table_every
        self.sample_groups_per_step = sample_groups_per_step
        self.max_sample_rows = max_sample_rows
        self.rows: list[SampleRow] = []
        self._run: Any = None
        self._last_step: int | None = None
        self._table_rows_logged = 0

    @property
    def active(self) -> bool:
        return self._run is not None

    def start(self, settings: StandaloneSettings, output_dir: Path) -> None:
        kwargs: dict[str, Any] = {
            "project": self.project or os.environ.get("WANDB_PROJECT") or DEFAULT_PROJECT,
            "name": self.name,  # None: wandb uses $WANDB_NAME, else makes one up
            "job_type": "standalone",
            "config": settings.model_dump(mode="json"),
        }
        if not os.environ.get("WANDB_DIR"):
            kwargs["dir"] = str(output_dir)  # wandb's default is the current directory
        try:
            self._run = self._wandb.init(**kwargs)
        except Exception as exc:
            log.warning("W&B logging is off for this run: wandb.init failed: %s", exc)
            self._run = None

    def log_step(self, stats: dict[str, Any], groups: list[list[dict[str, Any]]]) -> None:
        if self._run is None:
            return
        step = int(stats["step"])
        for outputs in groups[: self.sample_groups_per_step]:
            room = self.max_sample_rows - len(self.rows)
            self.rows += sample_rows(outputs)[: max(room, 0)]
        # Numbers only: the causes of masked rollouts are in the samples table, one per rollout.
        data = {PREFIX + key: value for key, value in stats.items() if key != "step" and not isinstance(value, dict)}
        if self.table_every and step % self.table_every == 0:  # steps count from 1
            data[TABLE_KEY] = self._table()
        self._guard("log a step", lambda: self._run.log(data, step=step))
        self._last_step = step

    def finish(self, summary: dict[str, Any] | None) -> None:
        if self._run is None:
            return
        run = self._run

        def send() -> None:
            if self.rows and self._table_rows_logged != len(self.rows):
                run.log({TABLE_KEY: self._table()}, step=self._last_step)
            if summary is not None:
                run.summary.update(_summary_numbers(summary))
            run.finish(exit_code=0 if summary is not None else 1)

        self._guard("finish the run", send)
        self._run = None

    def _table(self) -> Any:
        self._table_rows_logged = len(self.rows)
        data = [[getattr(row, column) for column in SAMPLE_COLUMNS] for row in self.rows]
        return self._wandb.Table(columns=SAMPLE_COLUMNS, data=data, allow_mixed_types=True)

    def _guard(self, what: str, action: Any) -> None:
        try:
            action()
        except Exception as exc:
            log.warning("W&B logging stopped: could not %s: %s", what, exc)
            run, self._run = self._run, None
            if run is not None:
                with contextlib.suppress(Exception):  # already failing; the warning above says why
                    run.finish(exit_code=1)


def _summary_numbers(summary: dict[str, Any]) -> dict[str, Any]:
    keys = (
        "reward_mean_first_step",
        "reward_mean_last_step",
        "zero_advantage_groups_mean",
        "rollouts",
        "masked",
        "seconds",
        "model",
        "base_url",
        "output_dir",
    )
    return {f"summary/{key}": summary[key] for key in keys if key in summary}
