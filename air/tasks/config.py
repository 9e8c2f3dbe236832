"""What a task is: the typed task and dataset YAML, the tables for what MLGym's files leave unsaid
(secret files, primary metrics), and which way a metric is better."""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

DEFAULT_TRAINING_TIMEOUT = 3600
# The whole evaluation's wall-clock budget by entrypoint, where a task does not set its own: a game plays its
# matches in seconds, a CSV is scored in seconds; a model task's evaluator may run the trained model at length
# (None: its training_timeout). Running out is a failed evaluation (the no-score penalty), never a masked rollout.
DEFAULT_EVALUATION_TIMEOUTS: dict[str, int | None] = {
    "PythonSubmissionTasks": 120,
    "CSVSubmissionTasks": 300,
    "ModelSubmissionTasks": None,
    "LMSubmissionTasks": None,
}
ENTRYPOINTS = ("CSVSubmissionTasks", "PythonSubmissionTasks", "ModelSubmissionTasks", "LMSubmissionTasks")


class TaskError(ValueError):
    """A task cannot be found or loaded; the message names the file at fault."""


# --- configs (every field of MLGym's schema) -------------------------------------------------


class SplitConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    file_regex: str


class DatasetConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    description: str
    data_path: str = Field(description="Root-relative folder when is_local, else a Hugging Face dataset id.")
    is_local: bool = False
    train_split: SplitConfig | None = None
    valid_split: SplitConfig | None = None
    test_split: SplitConfig | None = None


class TaskConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    name: str
    description: str
    dataset_configs: list[str] = Field(default_factory=list)
    task_entrypoint: Literal[ENTRYPOINTS] = "CSVSubmissionTasks"  # type: ignore[valid-type]
    training_timeout: int | None = None
    requirements_path: str | None = None
    use_generic_conda: bool = True
    starter_code: list[str] = Field(default_factory=list)
    baseline_paths: list[str] = Field(default_factory=list)
    baseline_scores: list[dict[str, float]] = Field(default_factory=list)
    sample_submission: str | None = None
    evaluation_paths: list[str] = Field(default_factory=list)
    evaluation_read_only: bool = False
    secret_files: list[str] = Field(default_factory=list)
    memory_path: str | None = None
    benchmark_name: str | None = None
    # air-agent's own field for a user's tasks (MLGym's configs do not have it): the primary metric's
    # attainable range, [low, high] with null for no bound. A score outside it is a forged one (the
    # evaluation is marked suspicious and earns nothing). Known tasks: KNOWN_SCORE_RANGES.
    score_range: tuple[float | None, float | None] | None = None
    # Also ours: the id column of a CSV submission, whose values must each appear once (checked before the
    # evaluator runs). Known tasks: KNOWN_SUBMISSION_ID_COLUMNS.
    submission_id_column: str | None = None
    # And ours: how many values a function of the agent's must return, "module.function" -> length (checked
    # in the evaluator's proxy, Python tasks). Known tasks: KNOWN_RETURN_LENGTHS.
    return_lengths: dict[str, int] | None = None
    # And ours: the whole evaluation's wall-clock budget in seconds (default: DEFAULT_EVALUATION_TIMEOUTS).
    evaluation_timeout: int | None = Field(default=None, gt=0)


# --- what MLGym's configs do not say ---------------------------------------------------------

# Answer files MLGym leaves readable in the workspace: hidden here like secret_files. Keyed by
# task id and by dataset config, so variants of a task on the same data (the house-price "L1"
# task) are covered too.
KNOWN_SECRET_FILES: dict[str, list[str]] = {
    "titanicSurvival": ["data/ground_truth.csv"],
    "regressionKaggleHousePrice": ["data/answer.csv"],
}
KNOWN_SECRET_FILES_BY_DATASET: dict[str, list[str]] = {
    "datasets/titanic.yaml": ["data/ground_truth.csv"],
    "datasets/kaggleHousePrice.yaml": ["data/answer.csv"],
}
# Files MLGym leaves writable although evaluation imports them: read-only here.
KNOWN_READ_ONLY_FILES: dict[str, list[str]] = {
    "battleOfSexes": ["target.py"],
    "prisonersDilemma": ["target.py"],
    "blotto": ["target.py"],
}
# The attainable range of the primary metric (by task id), where the metric bounds it: accuracies, R^2,
# BLEU, the games' payoffs per round, losses and times. None: unbounded on that side. Our own tasks are
# here too, not in their YAML, so that MLGym itself still loads them (its TaskConfig has no such key).
KNOWN_SCORE_RANGES: dict[str, tuple[float | None, float | None]] = {
    "laneMerge": (0.0, 5.0),  # payoff per round: 0, 1, 3 or 5
    "loanDefault": (0.0, 1.0),  # accuracy
    "buildingEnergy": (None, 1.0),  # R^2
    "ridgePenalty": (None, 1.0),  # R^2
    "battleOfSexes": (0.0, 2.0),
    "prisonersDilemma": (0.0, 5.0),
    "blotto": (-1.0, 1.0),
    "titanicSurvival": (0.0, 1.0),
    "imageClassificationCifar10": (0.0, 1.0),
    "imageClassificationFMnist": (0.0, 1.0),
    "imageCaptioningCOCO": (0.0, 1.0),
    "naturalLanguageInferenceMNLI": (0.0, 100.0),
    "regressionHousePrice": (None, 1.0),
    "regressionHousingPrice": (None, 1.0),
    "regressionKaggleHousePrice": (None, 1.0),
    "regressionKaggleHousePriceL1": (None, 1.0),
    "3SATTime": (0.0, None),
    "languageModelingFineWeb": (0.0, None),
    "rlMountainCarContinuous": (None, 100.0),
    "rlMountainCarContinuousReinforce": (None, 100.0),
}

# The id column of CSV submissions, by task id and by dataset config: MLGym's titanic merges on it, so
# repeated ids would count twice. Ours check it themselves; the table checks it for every evaluator.
KNOWN_SUBMISSION_ID_COLUMNS: dict[str, str] = {
    "titanicSurvival": "PassengerId",
    "regressionKaggleHousePrice": "Id",
    "regressionKaggleHousePriceL1": "Id",
    "loanDefault": "id",
    "buildingEnergy": "id",
}
KNOWN_SUBMISSION_ID_COLUMNS_BY_DATASET: dict[str, str] = {
    "datasets/titanic.yaml": "PassengerId",
    "datasets/kaggleHousePrice.yaml": "Id",
}

# MLGym's blotto checks an allocation's sum and signs, not its length, and zip() truncates: [120] would win
# every battlefield it is compared on. Six battlefields, as its target plays.
KNOWN_RETURN_LENGTHS: dict[str, dict[str, int]] = {"blotto": {"strategy.row_strategy": 6}}

# Primary metric and direction of MLGym's tasks whose first baseline key is not the primary one,
# or where lower is better.
KNOWN_PRIMARY_METRICS: dict[str, tuple[str, bool]] = {
    "regressionKaggleHousePrice": ("r2", True),
    "3SATTime": ("Time", False),
    "languageModelingFineWeb": ("val_loss", False),
}
_LOWER_IS_BETTER = re.compile(r"(loss|rmse|mse|mae|error|time|perplexity|regret)", re.IGNORECASE)


def lower_is_better(metric: str | None) -> bool:
    """Guess a metric's direction from its name (losses, errors and times go down)."""
    return bool(metric and _LOWER_IS_BETTER.search(metric))


def metric_value(metrics: dict[str, Any], name: str) -> float | None:
    """Look a metric up by name, ignoring case (MLGym stores titanic's baseline as 'Accuracy')."""
    if name in metrics:
        value = metrics[name]
    else:
        matches = [v for k, v in metrics.items() if k.lower() == name.lower()]
        if not matches:
            return None
        value = matches[0]
    try:
        return float(value)
    except (TypeError, ValueError):
        return None
