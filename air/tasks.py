"""MLGym-format tasks: find the task root, load task and dataset YAML, lay out a workspace in a
sandbox, and evaluate it where the agent cannot tamper with the result.

The task root is an MLGym checkout or any folder with the same layout (``configs/tasks``,
``configs/datasets``, ``data/``). It comes from an argument, else ``MLGYM_ROOT``, else the
built-in tasks; never from the current directory. Nothing of MLGym is imported: its files are
read at run time from the user's checkout.
"""

from __future__ import annotations

import asyncio
import fnmatch
import io
import json
import os
import re
import secrets
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from air.sandbox import WORKSPACE, Sandbox
from air.shell import MLGYM_CONDA_BIN

BUILTIN_TASK_ROOT = Path(__file__).resolve().parent / "tasks" / "builtin"
CONTAINER_SCRIPTS = Path(__file__).resolve().parent / "container"
AIR_DIR = "/opt/air"  # root-only folder in the container: pristine copies and our scripts
DEFAULT_TRAINING_TIMEOUT = 3600
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


# --- task root and loading -------------------------------------------------------------------


# A config can ask for the built-in tasks by name, whatever $MLGYM_ROOT says (configs/mlgym/rl_2gpu.toml).
BUILTIN_NAMES = ("builtin", "built-in")


def resolve_task_root(task_root: str | os.PathLike[str] | None = None) -> Path:
    """The task root: the argument ("builtin" names the built-in tasks), else $MLGYM_ROOT, else built-in."""
    if task_root is not None and str(task_root) in BUILTIN_NAMES:
        root, source = BUILTIN_TASK_ROOT, "the built-in tasks"
    elif task_root is not None and str(task_root) != "":
        root, source = Path(task_root).expanduser(), "the task_root argument"
    elif os.environ.get("MLGYM_ROOT"):
        root, source = Path(os.environ["MLGYM_ROOT"]).expanduser(), "$MLGYM_ROOT"
    else:
        root, source = BUILTIN_TASK_ROOT, "the built-in tasks"
    root = root.resolve()
    if not (root / "configs" / "tasks").is_dir():
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
    def secret_files(self) -> list[str]:
        by_dataset = [f for d in self.config.dataset_configs for f in KNOWN_SECRET_FILES_BY_DATASET.get(d, [])]
        return _unique([*self.config.secret_files, *KNOWN_SECRET_FILES.get(self.id, []), *by_dataset])

    @property
    def read_only_files(self) -> list[str]:
        return _unique([*self.config.evaluation_paths, *KNOWN_READ_ONLY_FILES.get(self.id, [])])

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
                raise TaskError(
                    f"Dataset {dataset.name!r} of task {self.name} expects local data in {source}, which does "
                    f"not exist.{_generator_hint(source) or ' Some MLGym tasks generate it first.'}"
                )
            # Like `docker cp dir ws/data`: the first dataset becomes data/, later ones data/<name>/.
            prefix = "data" if index == 0 else f"data/{source.name}"
            found = _walk(source, prefix)
            if not found:
                raise TaskError(
                    f"Dataset {dataset.name!r} of task {self.name}: {source} is empty (a generator that failed "
                    f"half-way leaves it so).{_generator_hint(source)}"
                )
            if index == 0:  # split globs are written against the workspace's data/ folder
                for split in (dataset.train_split, dataset.valid_split, dataset.test_split):
                    pattern = split.file_regex.removeprefix("./") if split else ""
                    if split and not any(fnmatch.fnmatch(path, pattern) for path in found):
                        raise TaskError(
                            f"Dataset {dataset.name!r} of task {self.name}: no file for its {split.name!r} split "
                            f"({split.file_regex}) in {source}.{_generator_hint(source)}"
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


def generator_command(data_folder: Path) -> str | None:
    """How an MLGym-style dataset folder is made: a script in its sibling ``_helpers/``, run from there."""
    helpers = data_folder.parent / "_helpers"
    scripts = sorted(p.name for p in helpers.glob("*.py")) if helpers.is_dir() else []
    return f"cd {helpers} && python {scripts[0]}" if scripts else None


def _generator_hint(data_folder: Path) -> str:
    command = generator_command(data_folder)
    return f" It is generated: `{command}`." if command else ""


def _walk(folder: Path, prefix: str) -> dict[str, Path]:
    return {
        f"{prefix}/{path.relative_to(folder).as_posix()}": path
        for path in sorted(folder.rglob("*"))
        if path.is_file() and "__pycache__" not in path.parts
    }


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(i.strip("/") for i in items))


def load_task(name: str, task_root: str | os.PathLike[str] | None = None) -> Task:
    """Load a task by config file name (``titanic``, ``titanic.yaml``) or by id."""
    root = resolve_task_root(task_root)
    tasks_dir = root / "configs" / "tasks"
    stem = Path(name).name.removesuffix(".yaml").removesuffix(".yml")
    path = tasks_dir / f"{stem}.yaml"
    if not path.exists():
        by_id = {_read_yaml(p).get("id"): p for p in tasks_dir.glob("*.yaml")}
        if stem not in by_id:
            known = ", ".join(list_tasks(root)) or "(none)"
            raise TaskError(f"Unknown task {name!r} in {tasks_dir}. Known tasks: {known}")
        path = by_id[stem]
    config: TaskConfig = _validated(TaskConfig, _read_yaml(path), path)
    datasets = []
    for rel in config.dataset_configs:
        dataset_path = root / "configs" / rel
        if not dataset_path.exists():
            raise TaskError(f"{path}: dataset config {rel!r} not found at {dataset_path}")
        datasets.append(_validated(DatasetConfig, _read_yaml(dataset_path), dataset_path))
    return Task(name=path.stem, root=root, config_path=path, config=config, datasets=datasets)


# --- evaluation results ----------------------------------------------------------------------


@dataclass(frozen=True)
class Evaluation:
    """The result of evaluating a workspace once."""

    metrics: dict[str, Any] | None
    score: float | None  # the primary metric, when the evaluation succeeded
    error: str | None = None  # what went wrong, worded for the agent
    status: Literal["ok", "submission_not_found", "evaluation_format_error", "evaluation_failed"] = "ok"
    submission: str | None = None
    duration_s: float = 0.0
    stderr: str = ""

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def parse_metrics(entrypoint: str, stdout: str) -> dict[str, Any]:
    """Read the metrics dict from evaluation output the way MLGym does for each entrypoint."""
    text = stdout.strip()
    if entrypoint in ("CSVSubmissionTasks", "PythonSubmissionTasks"):
        candidates = [text]
    else:  # Model and LM tasks print logs too: the first line that starts with '{'
        candidates = [line.strip() for line in text.splitlines() if line.strip().startswith("{")][:1]
    for candidate in candidates:
        try:
            value = json.loads(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    shown = text if len(text) < 2000 else text[:1000] + "\n...\n" + text[-1000:]
    raise ValueError(
        "Failed to decode metrics from the evaluation script: it must print one JSON object. "
        f"Output:\n---\n{shown}\n---"
    )


# --- a task in a sandbox ---------------------------------------------------------------------


class TaskWorkspace:
    """A task laid out in one sandbox: set up once, evaluated any number of times."""

    def __init__(self, task: Task, sandbox: Sandbox) -> None:
        self.task = task
        self.sandbox = sandbox
        self.python = "python3"

    async def setup(self) -> None:
        """Lay out the workspace as MLGym does (without its reset defect), secrets held back."""
        task = self.task
        files = task.workspace_files()
        secrets_ = set(task.secret_files)
        protected = _unique([*task.read_only_files, *secrets_, *(rel for rel in files if rel.startswith("data/"))])
        missing = [rel for rel in protected if rel not in files]
        if missing:
            raise TaskError(f"Task {task.name}: protected files {missing} are not among its files ({task.config_path})")
        _, out = await self.sandbox.exec_root(
            ["bash", "-c", f"[ -x {MLGYM_CONDA_BIN}/python ] && echo {MLGYM_CONDA_BIN} || true"]
        )
        conda_bin = out.strip()
        self.python = f"{conda_bin}/python" if conda_bin else "python3"
        path = ":".join(filter(None, [conda_bin, "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]))
        lists = {
            "protected.txt": protected,
            "secret.txt": sorted(secrets_),
            "readonly.txt": task.read_only_files,
            "path.txt": [path],
        }
        key = (path, tuple(protected))
        if key not in task._archives:  # built once per task (files can be MBs), off the event loop
            task._archives[key] = await asyncio.to_thread(_stage_archive, files, secrets_, protected, lists)
        archive = task._archives[key]
        await self.sandbox.put_archive(AIR_DIR, archive)
        code, out = await self.sandbox.exec_root(
            ["bash", f"{AIR_DIR}/bin/setup_workspace.sh", self.sandbox.config.user], timeout=300
        )
        if code != 0:
            raise TaskError(f"Laying out task {task.name} in the sandbox failed: {out.strip()[-2000:]}")

    def evaluation_command(self) -> tuple[str, list[str]]:
        """(submission kind, argv) for this task's entrypoint; ``{submission}`` is filled in later."""
        task = self.task
        script = f"{WORKSPACE}/{task.config.evaluation_paths[0]}" if task.config.evaluation_paths else None
        if script is None:
            raise TaskError(f"Task {task.name} has no evaluation_paths ({task.config_path})")
        entry = task.entrypoint
        if entry == "LMSubmissionTasks":
            gpus = "$(nvidia-smi --list-gpus 2>/dev/null | wc -l)"
            return "none", ["bash", "-c", f"n={gpus}; torchrun --nproc_per_node=$((n>0?n:1)) --standalone {script}"]
        kind, args = _SUBMISSIONS.get(entry, ("none", []))
        # -I: stdlib and site-packages come before the workspace, so a planted json.py or numpy/
        # cannot replace what the evaluation imports; the workspace is still importable (strategy.py).
        bootstrap = (
            "import runpy, sys; script = sys.argv[1]; sys.argv = sys.argv[1:]; "
            f"sys.path.append({WORKSPACE!r}); runpy.run_path(script, run_name='__main__')"
        )
        return kind, [self.python, "-I", "-B", "-c", bootstrap, script, *args]

    async def evaluate(self) -> Evaluation:
        """Evaluate the workspace as root, from pristine evaluation files; secrets only present meanwhile."""
        kind, argv = self.evaluation_command()
        separator = f"=====AIR-EVAL-{secrets.token_hex(8)}====="
        timeout = self.task.training_timeout
        start = time.perf_counter()
        code, out = await self.sandbox.exec_root(
            [
                "bash",
                f"{AIR_DIR}/bin/evaluate_workspace.sh",
                self.sandbox.config.user,
                str(timeout),
                separator,
                kind,
                *argv,
            ],
            timeout=timeout + 120,
        )
        duration = time.perf_counter() - start
        frame = f"\n{separator}\n"
        if frame not in out:
            message = f"Evaluation could not run: {out.strip()[-2000:]}"
            return Evaluation(None, None, message, "evaluation_failed", duration_s=duration)
        stdout, _, rest = out.partition(frame)
        rc_text, _, stderr = rest.partition("\n")
        if rc_text.strip() == "no-submission":  # the script's own word, not an exit code
            return Evaluation(None, None, stderr.strip(), "submission_not_found", duration_s=duration)
        rc = int(rc_text.strip() or -1)
        submission = f"{WORKSPACE}/submission.csv" if kind == "csv" else None
        if rc != 0:
            why = "was stopped after the time limit" if rc in (124, 137) else f"exited with code {rc}"
            message = f"The evaluation script {why}.\n{(stderr or stdout).strip()[-3000:]}"
            return Evaluation(None, None, message, "evaluation_failed", submission, duration, stderr)
        try:
            metrics = parse_metrics(self.task.entrypoint, stdout)
        except ValueError as exc:
            return Evaluation(None, None, str(exc), "evaluation_format_error", submission, duration, stderr)
        metric = self.task.primary_metric
        score = metric_value(metrics, metric) if metric else None
        if score is None and metrics:  # no baseline to name the metric: the first numeric value
            score = next((float(v) for v in metrics.values() if isinstance(v, int | float)), None)
        return Evaluation(metrics, score, None, "ok", submission, duration, stderr)


# What each entrypoint submits (checked before evaluating) and the arguments its script takes.
_SUBMISSIONS: dict[str, tuple[str, list[str]]] = {
    "CSVSubmissionTasks": ("csv", ["--submission_file", "{submission}"]),
    "ModelSubmissionTasks": ("yaml", ["--config_fname", "{submission}"]),
}


def _stage_archive(
    files: dict[str, Path], secret: set[str], protected: list[str], lists: dict[str, list[str]]
) -> bytes:
    """One tar for /opt/air: our scripts, the workspace files (secrets held back), pristine copies."""
    buf = io.BytesIO()

    def add(name: str, data: bytes | None = None, path: Path | None = None, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(name)
        raw = data if data is not None else path.read_bytes()  # type: ignore[union-attr]
        info.size, info.mode, info.mtime = len(raw), mode, int(time.time())
        tar.addfile(info, io.BytesIO(raw))

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for script in sorted(CONTAINER_SCRIPTS.glob("*.sh")):
            add(f"bin/{script.name}", path=script, mode=0o755)
        for rel, path in files.items():
            if rel not in secret:
                add(f"stage/ws/{rel}", path=path, mode=0o755 if os.access(path, os.X_OK) else 0o644)
        for rel in protected:
            add(f"pristine/{rel}", path=files[rel])
        for name, lines in lists.items():
            add(name, data=("".join(f"{line}\n" for line in lines)).encode())
    return buf.getvalue()
