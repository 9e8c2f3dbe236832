"""One task laid out in a sandbox: the workspace the agent works in, and evaluation where the agent
cannot tamper with the result."""

from __future__ import annotations

import asyncio
import hashlib
import io
import json
import math
import os
import secrets
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from air.sandbox.config import WORKSPACE
from air.sandbox.container import Sandbox
from air.tasks.config import TaskError, metric_value
from air.tasks.loader import Task, unique
from air.tasks.scripts import eval_frame
from air.tasks.trusted_python import SYSTEM_PATH, evaluation_python

CONTAINER_SCRIPTS = Path(__file__).resolve().parent / "scripts"  # run as root in the container
AIR_DIR = "/opt/air"  # root-only folder in the container: pristine copies and our scripts
AIR_LIB = "/opt/air-lib"  # the evaluation's own code (root's, readable by all, no secrets)
PRIVATE_COPY = "/opt/air-eval/task"  # the evaluator's copy of the task, unreachable by the agent
# Beyond the evaluator's budget, what the runner may take: the freeze (<= 10 s), copies, bounded reaping.
RUNNER_MARGIN_S = 120.0
# Our scripts on the interpreter the evaluator uses ($0): the one checked to be out of the agent's reach
# (trusted_python), never a python3 found on a PATH.
_ROOT_PYTHON = 'exec "$0" -I -B'
_RUN_RUNNER = f'{_ROOT_PYTHON} {AIR_LIB}/eval_runner.py "$@"'
_THAW = f'{_ROOT_PYTHON} {AIR_LIB}/agent_freeze.py thaw "$1"'


@dataclass(frozen=True)
class Evaluation:
    """The result of evaluating a workspace once."""

    metrics: dict[str, Any] | None
    score: float | None  # the primary metric, when the evaluation succeeded
    error: str | None = None  # what went wrong, worded for the agent
    status: Literal["ok", "submission_not_found", "evaluation_format_error", "evaluation_failed", "suspicious"] = "ok"
    submission: str | None = None
    duration_s: float = 0.0
    stderr: str = ""
    detail: str | None = None  # why a suspicious result was rejected (recorded, never shown to the agent)

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

    def __init__(
        self,
        task: Task,
        sandbox: Sandbox,
        agent_code_boundary: bool = True,
        seed: int | None = None,
        evaluation_timeout: float | None = None,
    ) -> None:
        self.task = task
        # The whole evaluation's wall-clock budget (seconds): the setting's, else the task's own.
        self.evaluation_timeout = evaluation_timeout or task.evaluation_timeout
        self.sandbox = sandbox
        self.python = "python3"
        # The rollout's evaluation seed (None: the evaluators' generators are left unseeded). Each
        # evaluation gets its own seed derived from it, see evaluation_seed.
        self.seed = seed
        self.evaluations = 0
        # False only to measure what the boundary costs (benchmarks/env.py): the agent's modules are then
        # imported into the evaluator as MLGym does, and can forge the score.
        self.agent_code_boundary = agent_code_boundary

    async def setup(self) -> None:
        """Lay out the workspace as MLGym does (without its reset defect), secrets held back."""
        task = self.task
        files = task.workspace_files()
        secrets_ = set(task.secret_files)
        protected = unique([*task.read_only_files, *secrets_, *(rel for rel in files if rel.startswith("data/"))])
        missing = [rel for rel in protected if rel not in files]
        if missing:
            raise TaskError(f"Task {task.name}: protected files {missing} are not among its files ({task.config_path})")
        found = await evaluation_python(self.sandbox)  # ImageNotPrepared where the agent could change it
        self.python = found.python
        path = ":".join(filter(None, [found.bin, SYSTEM_PATH]))
        lists = {
            "protected.txt": protected,
            "secret.txt": sorted(secrets_),
            "readonly.txt": task.read_only_files,
            "path.txt": [path],
            "id_column.txt": [task.submission_id_column] if task.submission_id_column else [],
            # The agent's modules the evaluator may import: the task's own, never one the agent adds.
            "agent_modules.txt": agent_modules(files, protected),
            "return_lengths.txt": [f"{name}={length}" for name, length in sorted(task.return_lengths.items())],
        }
        key = (path, tuple(protected))
        if key not in task._archives:  # built once per task (files can be MBs), off the event loop
            task._archives[key] = await asyncio.to_thread(_stage_archive, files, secrets_, protected, lists)
        archive = task._archives[key]
        # Into /opt (there in any image; /opt/air is not): no exec to make the folder first.
        await self.sandbox.put_archive(str(PurePosixPath(AIR_DIR).parent), archive)
        code, out = await self.sandbox.exec_root(
            ["bash", f"{AIR_DIR}/bin/setup_workspace.sh", self.sandbox.config.user], timeout=300
        )
        if code != 0:
            raise TaskError(f"Laying out task {task.name} in the sandbox failed: {out.strip()[-2000:]}")

    def evaluation_command(self) -> tuple[str, str, list[str]]:
        """(submission kind, runner mode, evaluator argv) for this task's entrypoint; ``{submission}`` is
        filled in later. The evaluator runs the pristine script from its private copy (PRIVATE_COPY)."""
        task = self.task
        if not task.config.evaluation_paths:
            raise TaskError(f"Task {task.name} has no evaluation_paths ({task.config_path})")
        script = f"{PRIVATE_COPY}/{task.config.evaluation_paths[0]}"
        entry = task.entrypoint
        mode = _RUNNER_MODES[entry]
        if mode == "python" and not self.agent_code_boundary:
            mode = "direct"
        if entry == "LMSubmissionTasks":
            gpus = "$(nvidia-smi --list-gpus 2>/dev/null | wc -l)"
            torchrun = f"n={gpus}; torchrun --nproc_per_node=$((n>0?n:1)) --standalone {script}"
            return "none", mode, ["bash", "-c", torchrun]
        kind, args = _SUBMISSIONS.get(entry, ("none", []))
        # -I: stdlib and site-packages come before the private copy, so a planted json.py or numpy/
        # cannot replace what the evaluation imports (eval_bootstrap.py sets the rest of sys.path).
        return kind, mode, [self.python, "-I", "-B", f"{AIR_LIB}/eval_bootstrap.py", mode, script, *args]

    async def _killed_early(self, duration: float, what: str) -> str:
        """Why ``what`` was killed before its budget: the container's memory, when its OOM killer has struck."""
        _, out = await self.sandbox.exec_root(["sh", "-c", _OOM_KILLS], timeout=30)
        kills = sum(int(word) for line in out.splitlines() for word in line.split()[1:2] if word.isdigit())
        if kills:
            return (
                f"The evaluation was killed after {duration:.0f} s: the container ran out of memory (its limit is "
                f"{self.sandbox.config.memory}) and the kernel's OOM killer ended {what}. Free memory (background "
                "jobs; files in /tmp and /dev/shm count against it) and try again: no score."
            )
        return f"The evaluation was killed after {duration:.0f} s, before its budget ran out ({what}): no score."

    async def evaluate(self) -> Evaluation:
        """Evaluate the workspace from pristine evaluation files: root prepares, the unprivileged evaluator
        runs the task's script, the agent's code answers from its own process; secrets only present meanwhile."""
        kind, mode, argv = self.evaluation_command()
        key = secrets.token_bytes(32)  # signs the one frame the runner answers with (eval_frame)
        budget = self.evaluation_timeout
        # In the environment, not on the command line: any process may read any process's argv.
        env = {eval_frame.KEY_VARIABLE: key.hex()}
        if self.seed is not None:
            env["AIR_EVAL_SEED"] = str(evaluation_seed(self.seed, self.evaluations))
        self.evaluations += 1
        start = time.perf_counter()
        over_disk = await self.sandbox.over_disk_limit()  # where the engine cannot size the container
        if over_disk:
            return Evaluation(None, None, f"No evaluation: {over_disk}", "evaluation_failed")
        config = self.sandbox.config
        runner = ["--mode", mode, "--timeout", f"{budget:g}", "--agent", config.user, "--submission-kind", kind]
        runner += ["--max-file-size", str(config.max_file_bytes), "--"]
        code, out = await self.sandbox.exec_root(
            ["sh", "-c", _RUN_RUNNER, self.python, *runner, *argv], timeout=budget + RUNNER_MARGIN_S, env=env
        )
        duration = time.perf_counter() - start
        try:
            payload = eval_frame.decode(key, out.encode("utf-8", "replace"))
        except eval_frame.FrameError as exc:
            if code in (124, 137):  # the runner itself was cut: it could not resume the agent's processes
                await self.sandbox.exec_root(["sh", "-c", _THAW, self.python, config.user], timeout=30)
                message = f"The evaluation ran past its budget ({budget:g} s) and was stopped: no score."
                if duration < budget + RUNNER_MARGIN_S - 5:  # not our time limit: the kernel's OOM killer, or none
                    message = await self._killed_early(duration, "the evaluation's runner")
            else:
                message = f"Evaluation could not run ({exc}): {out.strip()[-2000:]}"
            return Evaluation(None, None, message, "evaluation_failed", duration_s=duration)
        if payload.get("kind") == "no-submission":
            message = str(payload.get("message", "")).strip()
            return Evaluation(None, None, message, "submission_not_found", duration_s=duration)
        if payload.get("kind") != "result":
            message = f"Evaluation could not run: {payload.get('message', payload)}"
            return Evaluation(None, None, message, "evaluation_failed", duration_s=duration)
        stdout, stderr, rc = str(payload["stdout"]), str(payload["stderr"]), int(payload["rc"])
        submission = f"{WORKSPACE}/submission.csv" if kind == "csv" else None
        if payload.get("dropped"):  # a score channel flooded (only agent code can make an evaluator do that)
            size = payload.get("stdout_bytes")
            message = f"The evaluation printed {size} bytes on stdout (at most 1 MB are read): no score."
            return Evaluation(None, None, message, "evaluation_failed", submission, duration, stderr)
        if rc != 0:
            if rc == 124:
                why = f"ran past its budget of {budget:g} s (the whole evaluation) and was stopped"
            else:
                why = "was stopped after the time limit" if rc == 137 else f"exited with code {rc}"
            message = f"The evaluation script {why}.\n{(stderr or stdout).strip()[-3000:]}"
            if rc in (-9, 137) and duration < budget:  # SIGKILL before its budget: out of memory, most likely
                message = await self._killed_early(duration, "the evaluation script") + "\n" + message
            return Evaluation(None, None, message, "evaluation_failed", submission, duration, stderr)
        agent_code_ran = mode in ("model", "direct")  # the agent's code ran inside the evaluator
        try:
            metrics = parse_metrics(self.task.entrypoint, stdout)
        except ValueError as exc:
            if agent_code_ran:
                return Evaluation(None, None, REJECTED, "suspicious", submission, duration, stderr, str(exc))
            return Evaluation(None, None, str(exc), "evaluation_format_error", submission, duration, stderr)
        metric = self.task.primary_metric
        score = metric_value(metrics, metric) if metric else None
        if score is None and metrics:  # no baseline to name the metric: the first numeric value
            score = next((float(v) for v in metrics.values() if isinstance(v, int | float)), None)
        if score is not None and not math.isfinite(score) and not agent_code_ran:  # e.g. NaN predictions
            message = f"The evaluation computed a non-finite score ({score}): check that every prediction is a number."
            return Evaluation(metrics, None, message, "evaluation_failed", submission, duration, stderr)
        problem = suspicion(self.task, metrics, score, agent_code_ran)
        if problem:
            return Evaluation(metrics, None, REJECTED, "suspicious", submission, duration, stderr, problem)
        return Evaluation(metrics, score, None, "ok", submission, duration, stderr)


# The container's count of OOM kills: cgroup v2 (memory.events), else v1 (memory.oom_control); "" if neither.
_OOM_KILLS = "cat /sys/fs/cgroup/memory.events /sys/fs/cgroup/memory/memory.oom_control 2>/dev/null | grep oom_kill"


# What the agent reads about a rejected result: that it was rejected, never what an accepted one looks like.
REJECTED = "The evaluation's output was rejected: it cannot come from an honest evaluation. Nothing was counted."


def agent_modules(files: dict[str, Path], protected: list[str]) -> list[str]:
    """The agent's modules among a task's files: top-level ``*.py`` files and top-level folders holding
    Python (``src/``), none of them protected."""
    mine = [rel for rel in files if rel.endswith(".py") and rel not in protected]
    return sorted({rel if "/" not in rel else rel.split("/")[0] + "/" for rel in mine})


def evaluation_seed(seed: int, index: int) -> int:
    """The seed of a rollout's ``index``-th evaluation (0-based): fixed by the rollout's seed, so identical
    rollouts of a group score identically and a replay reproduces each score; different from one
    evaluation to the next, so a strategy cannot learn one evaluation's draws and replay them at the next.
    64 bits: the agent's worker gets a 32-bit seed derived from it, which 2^32 guesses must not invert."""
    digest = hashlib.sha256(f"air-evaluation/{seed}/{index}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def suspicion(task: Task, metrics: dict[str, Any], score: float | None, agent_code_ran: bool) -> str | None:
    """Why an evaluation's result cannot be genuine, or None. A score outside the metric's attainable
    range (``score_range``) or not finite is forged; where the agent's code ran inside the evaluator,
    metrics that are not the task's (other keys than its baseline's, non-numeric values) are too."""
    if score is not None and not math.isfinite(score):
        return f"The evaluation reported a non-finite score ({score}): not counted."
    bounds = task.score_range
    if score is not None and bounds is not None:
        low, high = bounds
        if (low is not None and score < low) or (high is not None and score > high):
            return (
                f"The evaluation reported {score:g}, outside what {task.primary_metric} can reach "
                f"([{low if low is not None else '-inf'}, {high if high is not None else 'inf'}]): not counted."
            )
    if agent_code_ran and task.baseline:
        expected = {k.lower() for k in task.baseline}
        got = {str(k).lower() for k in metrics}
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in metrics.values())
        if got != expected or not numeric:
            return f"The evaluation's output {sorted(got)} is not the task's metrics {sorted(expected)}: not counted."
    return None


# Where the agent's code runs during evaluation: "python", behind a process boundary (eval_runner.py);
# "plain", nowhere (CSV files are read as data); "model", inside the evaluator (MLGym's scripts load it).
_RUNNER_MODES = {
    "PythonSubmissionTasks": "python",
    "CSVSubmissionTasks": "plain",
    "ModelSubmissionTasks": "model",
    "LMSubmissionTasks": "model",
}

# What each entrypoint submits (checked before evaluating) and the arguments its script takes.
_SUBMISSIONS: dict[str, tuple[str, list[str]]] = {
    "CSVSubmissionTasks": ("csv", ["--submission_file", "{submission}"]),
    "ModelSubmissionTasks": ("yaml", ["--config_fname", "{submission}"]),
}


def _stage_archive(
    files: dict[str, Path], secret: set[str], protected: list[str], lists: dict[str, list[str]]
) -> bytes:
    """One tar for /opt/air: our scripts, the workspace files (secrets held back), pristine copies (each entry
    under ``air/``, the archive being unpacked in /opt)."""
    buf = io.BytesIO()
    top = PurePosixPath(AIR_DIR).name

    def add(name: str, data: bytes | None = None, path: Path | None = None, mode: int = 0o644) -> None:
        info = tarfile.TarInfo(f"{top}/{name}")
        raw = data if data is not None else path.read_bytes()  # type: ignore[union-attr]
        info.size, info.mode, info.mtime = len(raw), mode, int(time.time())
        tar.addfile(info, io.BytesIO(raw))

    with tarfile.open(fileobj=buf, mode="w") as tar:
        for script in sorted([*CONTAINER_SCRIPTS.glob("*.sh"), *CONTAINER_SCRIPTS.glob("*.py")]):
            add(f"bin/{script.name}", path=script, mode=0o755)
        for rel, path in files.items():
            if rel not in secret:
                add(f"stage/ws/{rel}", path=path, mode=0o755 if os.access(path, os.X_OK) else 0o644)
        for rel in protected:
            add(f"pristine/{rel}", path=files[rel])
        for name, lines in lists.items():
            add(name, data=("".join(f"{line}\n" for line in lines)).encode())
    return buf.getvalue()
