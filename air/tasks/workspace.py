"""One task laid out in a sandbox: the workspace the agent works in, and evaluation where the agent
cannot tamper with the result."""

from __future__ import annotations

import asyncio
import io
import json
import os
import secrets
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from air.sandbox.config import WORKSPACE
from air.sandbox.container import Sandbox
from air.sandbox.shell import MLGYM_CONDA_BIN
from air.tasks.config import TaskError, metric_value
from air.tasks.loader import Task, unique

CONTAINER_SCRIPTS = Path(__file__).resolve().parent / "scripts"  # run as root in the container
AIR_DIR = "/opt/air"  # root-only folder in the container: pristine copies and our scripts


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
        protected = unique([*task.read_only_files, *secrets_, *(rel for rel in files if rel.startswith("data/"))])
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
