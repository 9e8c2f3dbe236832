"""MLGym-format tasks: find the task root, list its tasks, and load one (task and dataset YAML) into
a ``Task`` that knows its files, secrets, metric and baseline (laid out by ``workspace``).

The task root is an MLGym checkout or any folder with the same layout (``configs/tasks``,
``configs/datasets``, ``data/``). It comes from an argument, else ``MLGYM_ROOT``, else the
built-in tasks; never from the current directory. Nothing of MLGym is imported: its files are
read at run time from the user's checkout.
"""

from __future__ import annotations

import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from air.tasks.config import (
    DEFAULT_EVALUATION_TIMEOUTS,
    DEFAULT_TRAINING_TIMEOUT,
    KNOWN_PRIMARY_METRICS,
    KNOWN_READ_ONLY_FILES,
    KNOWN_RETURN_LENGTHS,
    KNOWN_SCORE_RANGES,
    KNOWN_SECRET_FILES,
    KNOWN_SECRET_FILES_BY_DATASET,
    KNOWN_SUBMISSION_ID_COLUMNS,
    KNOWN_SUBMISSION_ID_COLUMNS_BY_DATASET,
    DatasetConfig,
    TaskConfig,
    TaskError,
    lower_is_better,
    metric_value,
)
from air.tasks.names import MLGYM_ROOT_FIX, config_stem, did_you_mean, is_mlgym_task

BUILTIN_TASK_ROOT = Path(__file__).resolve().parent / "builtin"


# A config can ask for the built-in tasks by name, whatever $MLGYM_ROOT says (configs/mlgym/rl_2gpu.toml).
BUILTIN_NAMES = ("builtin", "built-in")


def task_root_source(task_root: str | os.PathLike[str] | None = None) -> tuple[Path, str]:
    """Where the task root comes from, unchecked: the argument ("builtin" names the built-in tasks), else
    $MLGYM_ROOT, else the parent of $MLGYM_CONFIG_ROOT (the original guide's ``<MLGym>/configs``), else
    the built-in tasks."""
    if task_root is not None and str(task_root) in BUILTIN_NAMES:
        return BUILTIN_TASK_ROOT, "the built-in tasks"
    if task_root is not None and str(task_root) != "":
        return Path(task_root).expanduser(), "the task_root argument"
    if os.environ.get("MLGYM_ROOT"):
        return Path(os.environ["MLGYM_ROOT"]).expanduser(), "$MLGYM_ROOT"
    if os.environ.get("MLGYM_CONFIG_ROOT"):
        configs = Path(os.environ["MLGYM_CONFIG_ROOT"]).expanduser().resolve()
        if configs.name != "configs":
            raise TaskError(
                f"$MLGYM_CONFIG_ROOT is {configs}: it names an MLGym checkout's configs/ folder "
                "(<MLGym>/configs); or set MLGYM_ROOT to the checkout itself"
            )
        return configs.parent, "$MLGYM_CONFIG_ROOT"
    return BUILTIN_TASK_ROOT, "the built-in tasks"


def resolve_task_root(task_root: str | os.PathLike[str] | None = None) -> Path:
    """The task root (see ``task_root_source``), checked to hold ``configs/tasks/``."""
    root, source = task_root_source(task_root)
    root = root.resolve()
    if not (root / "configs" / "tasks").is_dir():
        # <MLGym>/configs or <MLGym>/configs/tasks given for the checkout: name the checkout.
        checkout = next((p for p in root.parents[:2] if (p / "configs" / "tasks").is_dir()), None)
        if checkout is not None:
            raise TaskError(
                f"Task root {root} (from {source}) has no configs/tasks/ folder; did you mean {checkout}? "
                "(the task root is the MLGym checkout itself, the folder that contains configs/ and data/)"
            )
        raise TaskError(
            f"Task root {root} (from {source}) has no configs/tasks/ folder. Point it at an MLGym "
            "checkout (the folder that contains configs/ and data/) or leave it unset for the built-in tasks."
        )
    return root


def list_tasks(task_root: str | os.PathLike[str] | None = None) -> list[str]:
    root = resolve_task_root(task_root)
    return sorted(p.stem for p in (root / "configs" / "tasks").glob("*.yaml"))


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        data = yaml.safe_load(path.read_text())
    except FileNotFoundError:
        raise TaskError(f"{path} does not exist") from None
    except yaml.YAMLError as exc:
        raise TaskError(f"{path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise TaskError(f"{path} must hold a mapping of fields, got {type(data).__name__}")
    return data


def _validated(model: type[BaseModel], data: dict[str, Any], path: Path) -> Any:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise TaskError(f"{path}: {problems}") from None


@dataclass
class Task:
    """One loaded task: its configs and where its files are on the host."""

    name: str  # the config's file stem: how users name a task
    root: Path
    config_path: Path
    config: TaskConfig
    datasets: list[DatasetConfig]
    _files: dict[str, Path] | None = field(default=None, repr=False)
    _archives: dict[tuple[str, tuple[str, ...]], bytes] = field(default_factory=dict, repr=False)

    @property
    def id(self) -> str:
        return self.config.id

    @property
    def entrypoint(self) -> str:
        return self.config.task_entrypoint

    @property
    def training_timeout(self) -> int:
        return self.config.training_timeout or DEFAULT_TRAINING_TIMEOUT

    @property
    def evaluation_timeout(self) -> int:
        """The whole evaluation's budget (seconds): the config's, else its entrypoint's, within training_timeout."""
        default = DEFAULT_EVALUATION_TIMEOUTS.get(self.entrypoint) or self.training_timeout
        return self.config.evaluation_timeout or min(default, self.training_timeout)

    def dataset_docs(self) -> str:
        return "".join(f"{d.name.upper()}:\n{d.description}\n\n" for d in self.datasets)

    @property
    def description(self) -> str:
        # str.replace, not str.format: descriptions may contain other braces (code, dicts).
        return self.config.description.replace("{dataset_docs}", self.dataset_docs())

    @property
    def baseline(self) -> dict[str, float]:
        return dict(self.config.baseline_scores[0]) if self.config.baseline_scores else {}

    @property
    def primary_metric(self) -> str | None:
        if self.id in KNOWN_PRIMARY_METRICS:
            return KNOWN_PRIMARY_METRICS[self.id][0]
        return next(iter(self.baseline), None)

    @property
    def higher_is_better(self) -> bool:
        if self.id in KNOWN_PRIMARY_METRICS:
            return KNOWN_PRIMARY_METRICS[self.id][1]
        return not lower_is_better(self.primary_metric)

    @property
    def baseline_score(self) -> float | None:
        metric = self.primary_metric
        return metric_value(self.baseline, metric) if metric else None

    @property
    def score_range(self) -> tuple[float | None, float | None] | None:
        """The primary metric's attainable range: the config's ``score_range``, else MLGym's table."""
        return self.config.score_range or KNOWN_SCORE_RANGES.get(self.id)

    @property
    def secret_files(self) -> list[str]:
        by_dataset = [f for d in self.config.dataset_configs for f in KNOWN_SECRET_FILES_BY_DATASET.get(d, [])]
        return unique([*self.config.secret_files, *KNOWN_SECRET_FILES.get(self.id, []), *by_dataset])

    @property
    def submission_id_column(self) -> str | None:
        """The CSV submission's id column (each id once): the config's, else the tables'."""
        by_dataset = [KNOWN_SUBMISSION_ID_COLUMNS_BY_DATASET.get(d) for d in self.config.dataset_configs]
        known = KNOWN_SUBMISSION_ID_COLUMNS.get(self.id) or next(filter(None, by_dataset), None)
        return self.config.submission_id_column or known

    @property
    def return_lengths(self) -> dict[str, int]:
        """How many values the agent's functions must return ("module.function" -> length)."""
        return {**KNOWN_RETURN_LENGTHS.get(self.id, {}), **(self.config.return_lengths or {})}

    @property
    def read_only_files(self) -> list[str]:
        return unique([*self.config.evaluation_paths, *KNOWN_READ_ONLY_FILES.get(self.id, [])])

    def workspace_files(self) -> dict[str, Path]:
        """Workspace-relative path -> host file, for every file MLGym's reset would lay out."""
        if self._files is None:
            self._files = self._collect_files()
        return self._files

    def _collect_files(self) -> dict[str, Path]:
        files: dict[str, Path] = {}
        local = [d for d in self.datasets if d.is_local]
        for index, dataset in enumerate(local):
            source = self.root / dataset.data_path
            if not source.is_dir():
                raise _missing_data(
                    f"Dataset {dataset.name!r} of task {self.name} expects local data in {source}, which does "
                    "not exist.",
                    source,
                    " Some MLGym tasks generate it first.",
                )
            # Like `docker cp dir ws/data`: the first dataset becomes data/, later ones data/<name>/.
            prefix = "data" if index == 0 else f"data/{source.name}"
            found = _walk(source, prefix)
            if not found:
                raise _missing_data(
                    f"Dataset {dataset.name!r} of task {self.name}: {source} is empty (a generator that failed "
                    "half-way leaves it so).",
                    source,
                )
            if index == 0:  # split globs are written against the workspace's data/ folder
                for split in (dataset.train_split, dataset.valid_split, dataset.test_split):
                    pattern = split.file_regex.removeprefix("./") if split else ""
                    if split and not any(fnmatch.fnmatch(path, pattern) for path in found):
                        raise _missing_data(
                            f"Dataset {dataset.name!r} of task {self.name}: no file for its {split.name!r} split "
                            f"({split.file_regex}) in {source}.",
                            source,
                        )
            files.update(found)
        for entry in self.config.starter_code:
            source = self.root / entry
            if not source.exists():
                raise TaskError(f"Starter code {entry!r} of task {self.name} ({self.config_path}) is missing: {source}")
            files.update(_walk(source, source.name) if source.is_dir() else {source.name: source})
        for rel in self.config.evaluation_paths:
            if rel not in files:
                raise TaskError(
                    f"Evaluation script {rel!r} of task {self.name} is not provided by its starter_code "
                    f"or datasets ({self.config_path})"
                )
        return files


class MissingDataError(TaskError):
    """A task's local dataset folder is missing, empty or lacks a split; ``fix`` says how to make it."""

    def __init__(self, message: str, fix: str) -> None:
        super().__init__(message)
        self.fix = fix


class UnknownTaskError(TaskError):
    """No task config of that name or id in the task root (the message lists the known ones and, where
    it can tell, the fix: the name meant, or the MLGym checkout the task needs)."""


def find_task_config(name: str, task_root: str | os.PathLike[str] | None = None) -> Path:
    """The config file of a task named by file name (``titanic``, ``titanic.yaml``) or by id."""
    root = resolve_task_root(task_root)
    tasks_dir = root / "configs" / "tasks"
    stem = config_stem(name)
    path = tasks_dir / f"{stem}.yaml"
    if path.exists():
        return path
    ids = {p: _read_yaml(p).get("id") for p in sorted(tasks_dir.glob("*.yaml"))}
    by_id = {str(task_id): p for p, task_id in ids.items() if task_id}
    if stem in by_id:
        return by_id[stem]
    known = list_tasks(root)
    guess = did_you_mean(stem, [*known, *by_id])
    if guess:
        hint = f"; did you mean {guess}?"
    elif root == BUILTIN_TASK_ROOT and is_mlgym_task(stem):  # not a typo: MLGym's checkout is missing
        hint = f"; it is an MLGym task, not a built-in one: {MLGYM_ROOT_FIX}, or give its task root."
    else:
        hint = "."
    raise UnknownTaskError(f"Unknown task {name!r} in {tasks_dir}{hint} Known tasks: {', '.join(known) or '(none)'}")


# MLGym's generators were written for pandas 2: pandas 3 (this project's) rejects their
# ``drop(columns=..., axis=1)``. uv runs them with their own pandas, outside any project (MLGym's too).
GENERATOR_PYTHON = "uv run --no-project --with 'pandas<3' --with scikit-learn python"


def generator_command(data_folder: Path) -> str | None:
    """How an MLGym-style dataset folder is made: a script in its sibling ``_helpers/``, run from there."""
    helpers = data_folder.parent / "_helpers"
    scripts = sorted(p.name for p in helpers.glob("*.py")) if helpers.is_dir() else []
    return f"cd {helpers} && {GENERATOR_PYTHON} {scripts[0]}" if scripts else None


def _missing_data(message: str, data_folder: Path, otherwise: str = "") -> MissingDataError:
    command = generator_command(data_folder)
    hint = f" It is generated: `{command}`." if command else otherwise
    return MissingDataError(message + hint, command or f"restore the files of {data_folder}")


def _walk(folder: Path, prefix: str) -> dict[str, Path]:
    return {
        f"{prefix}/{path.relative_to(folder).as_posix()}": path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(i.strip("/") for i in items))


def load_task(name: str, task_root: str | os.PathLike[str] | None = None) -> Task:
    """Load a task by config file name (``titanic``, ``titanic.yaml``) or by id."""
    root = resolve_task_root(task_root)
    path = find_task_config(name, root)
    config: TaskConfig = _validated(TaskConfig, _read_yaml(path), path)
    datasets = []
    for rel in config.dataset_configs:
        dataset_path = root / "configs" / rel
        if not dataset_path.exists():
            raise TaskError(f"{path}: dataset config {rel!r} not found at {dataset_path}")
        datasets.append(_validated(DatasetConfig, _read_yaml(dataset_path), dataset_path))
    return Task(name=path.stem, root=root, config_path=path, config=config, datasets=datasets)
