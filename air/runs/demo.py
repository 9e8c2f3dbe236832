"""``air demo``: every task's baseline, reproduced in fresh sandboxes from a warm pool.

The end-to-end check of the foundation on a machine without GPUs: pool -> workspace layout ->
baseline run as the agent -> tamper-proof evaluation -> score against the recorded baseline.

Each task ends with one status (docs/tasks.md, "air demo"): reproduced, differs, no baseline shipped, data
missing (with the command that makes it) or failed (with the whole reason). What can be decided from
the task's files (a broken config, missing data) is decided before any container starts.
"""

from __future__ import annotations

import asyncio
import math
import re
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from rich import box
from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from air.sandbox.config import SandboxConfig
from air.sandbox.errors import SandboxError
from air.sandbox.neutral import neutral
from air.sandbox.pool import SandboxPool
from air.tasks.config import TaskError
from air.tasks.loader import MissingDataError, Task, UnknownTaskError, load_task
from air.tasks.workspace import TaskWorkspace

Status = Literal["reproduced", "differs", "no baseline shipped", "data missing", "failed"]
FAILING: tuple[Status, ...] = ("differs", "failed")  # what makes `air demo` exit 1
STYLES = {"reproduced": "green", "differs": "red", "failed": "red", "no baseline shipped": "yellow"}

DEMO_SEED = 0  # the rollout seed the demo evaluates under: a rerun gives the same scores
# A deterministic evaluation must match the recorded score to 1e-3 (relative above 1: RMSEs in the 10^4).
EXACT_TOLERANCE = 1e-3
# An evaluation that samples (two seeds, two scores: MLGym's games) cannot match a score recorded under
# an unknown seed exactly. It is evaluated under SAMPLED_SEEDS seeds; the recorded score, one more draw,
# must lie within SAMPLED_SIGMAS standard deviations of their mean (experiments.md, "air demo tolerance").
SAMPLED_SEEDS = 8
SAMPLED_SIGMAS = 4.0
OUTPUT_TAIL_LINES = 20  # of a failed baseline script's output: where its traceback is


@dataclass
class DemoResult:
    name: str
    status: Status
    task: Task | None = None
    score: float | None = None  # the mean over the seeds when the evaluation samples
    spread: float | None = None  # the standard deviation over the seeds, when it samples
    detail: str = ""  # the whole reason, or the fix
    seconds: float = 0.0


def judge(recorded: float, scores: Sequence[float]) -> tuple[Status, str]:
    """Reproduced or differs: one score (a deterministic evaluation) or one per seed (a sampled one)."""
    if len(scores) == 1:
        tolerance = EXACT_TOLERANCE * max(1.0, abs(recorded))
        difference = abs(scores[0] - recorded)
        if difference <= tolerance:
            return "reproduced", ""
        detail = f"{scores[0]:.6g} is {difference:.3g} from the recorded {recorded:.6g} (allowed {tolerance:.3g})"
        return "differs", detail
    mean, spread = statistics.mean(scores), statistics.stdev(scores)
    # The recorded score and the mean of n draws differ by sd * sqrt(1 + 1/n) when both are fair draws.
    allowed = SAMPLED_SIGMAS * spread * math.sqrt(1 + 1 / len(scores))
    if abs(recorded - mean) <= allowed:
        return "reproduced", ""
    return "differs", (
        f"the recorded {recorded:.6g} is {abs(recorded - mean):.3g} from the mean {mean:.6g} of {len(scores)} seeded "
        f"evaluations (allowed: {SAMPLED_SIGMAS:g} sd, {allowed:.3g})"
    )


def prepare(names: Sequence[str], task_root: str | None, config: SandboxConfig) -> tuple[list[Task], list[DemoResult]]:
    """The tasks to run, and a result for each task that cannot run (decided from its files alone).
    An unknown task name is the user's typo, not a task's state: it raises."""
    runnable: list[Task] = []
    decided: list[DemoResult] = []
    for name in names:
        try:
            task = load_task(name, task_root)
        except UnknownTaskError:
            raise
        except TaskError as exc:
            decided.append(DemoResult(name, "failed", detail=str(exc)))
            continue
        try:
            task.workspace_files()
        except MissingDataError as exc:
            detail = str(exc) if exc.fix in str(exc) else f"{exc} Fix: {exc.fix}"
            decided.append(DemoResult(task.name, "data missing", task, detail=detail))
            continue
        except TaskError as exc:
            decided.append(DemoResult(task.name, "failed", task, detail=str(exc)))
            continue
        remote = [d.data_path for d in task.datasets if not d.is_local]
        if remote and not config.network:
            detail = f"its baseline downloads {', '.join(remote)} from the Hugging Face hub: rerun with --network"
            decided.append(DemoResult(task.name, "data missing", task, detail=detail))
        elif task.baseline_score is None:
            detail = f"its config records no {task.primary_metric or 'baseline'} score to reproduce"
            decided.append(DemoResult(task.name, "no baseline shipped", task, detail=detail))
        else:
            runnable.append(task)
    return runnable, decided


async def reproduce_baseline(pool: SandboxPool, task: Task, timeout: float | None = None) -> DemoResult:
    loop = asyncio.get_running_loop()
    start = loop.time()
    try:
        result = await _reproduce(pool, task, timeout)
    except (TaskError, SandboxError) as exc:
        result = DemoResult(task.name, "failed", task, detail=f"{type(exc).__name__}: {exc}")
    result.seconds = loop.time() - start
    return result


async def _reproduce(pool: SandboxPool, task: Task, timeout: float | None) -> DemoResult:
    sandbox = await pool.acquire()
    try:
        workspace = TaskWorkspace(task, sandbox, seed=DEMO_SEED)
        await workspace.setup()
        limit = timeout or task.training_timeout
        for script in task.config.baseline_paths:
            run = await sandbox.run(f"python {script}", timeout=limit)
            if run.exit_code != 0:
                why = f"stopped after {limit:g} s" if run.timed_out else f"exited with {run.exit_code}"
                tail = "\n".join(run.output.rstrip().splitlines()[-OUTPUT_TAIL_LINES:])
                detail = f"`python {script}` {why}:\n{tail}{_missing_module_hint(run.output)}"
                return DemoResult(task.name, "failed", task, detail=detail)
        scores: list[float] = []
        for index in range(SAMPLED_SEEDS):
            evaluation = await workspace.evaluate()  # each under its own seed, derived from DEMO_SEED
            if evaluation.status == "submission_not_found" and not task.config.baseline_paths:
                detail = "the task ships no baseline script (no baseline_paths) and its workspace has no submission"
                return DemoResult(task.name, "no baseline shipped", task, detail=detail)
            if evaluation.score is None:
                reason = f"evaluation {evaluation.status.replace('_', ' ')}: {evaluation.error or 'no score'}"
                return DemoResult(task.name, "failed", task, detail=reason)
            scores.append(evaluation.score)
            if index == 1 and scores[0] == scores[1]:
                scores = scores[:1]  # two seeds, one score: the evaluation does not sample
                break
        assert task.baseline_score is not None  # prepare() kept only tasks with one
        status, detail = judge(task.baseline_score, scores)
        spread = statistics.stdev(scores) if len(scores) > 1 else None
        return DemoResult(task.name, status, task, statistics.mean(scores), spread, detail)
    finally:
        pool.release(sandbox)


async def run_demo(
    names: Sequence[str],
    task_root: str | None,
    config: SandboxConfig,
    console: Console,
    timeout: float | None = None,
) -> list[DemoResult]:
    runnable, results = prepare(names, task_root, config)
    if runnable:
        progress = Progress(
            SpinnerColumn(),
            TextColumn("{task.description}"),
            BarColumn(),
            TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(),
            console=console,
        )
        async with SandboxPool(config, size=min(len(runnable), 4)) as pool:
            with progress:
                bar = progress.add_task("reproducing baselines in sandboxes", total=len(runnable))

                async def one(task: Task) -> None:
                    results.append(await reproduce_baseline(pool, task, timeout))
                    progress.advance(bar)

                await asyncio.gather(*(one(task) for task in runnable))
    print_results(results, console, config.resolved_image())
    return results


def _missing_module_hint(output: str) -> str:
    """A baseline that needs a library the image lacks (MLGym's RL baselines import jax): say which image has it."""
    found = re.findall(r"ModuleNotFoundError: No module named '([^']+)'", output)
    if not found:
        return ""
    return (
        f"\nFix: the image lacks the Python module {found[-1]!r}; run with an image that has it, e.g. "
        "MLGym's own, prepared once: `uv run air build-image --from aigym/mlgym-agent:latest`, then --image with the "
        "tag it prints; or add the module to this project's image"
    )


def demo_failed(results: Sequence[DemoResult]) -> bool:
    """The exit rule (docs/tasks.md): a baseline that differs or a task that failed; missing data and tasks
    without a baseline are reported, not failures."""
    return any(r.status in FAILING for r in results)


def print_results(results: Sequence[DemoResult], console: Console, image: str) -> None:
    # Light borders, metric and time under the name: MLGym's longest names fit 80 columns unbroken.
    table = Table(title=f"Baselines reproduced in {image}", box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
    table.add_column("task", no_wrap=True)
    table.add_column("status")  # wraps between words: "no baseline / shipped"
    table.add_column("recorded", no_wrap=True, justify="right")
    table.add_column("reproduced", justify="right")  # the spread of a sampled score wraps under it
    ordered = sorted(results, key=lambda r: r.name)
    for r in ordered:
        task = r.task
        notes = [f"{task.primary_metric} {'↑' if task.higher_is_better else '↓'}"] if task else []
        notes += [f"{r.seconds:.0f}s"] if r.seconds else []
        name = Text(r.name)
        if notes:
            name.append("\n  " + ", ".join(notes), style="dim")
        recorded = f"{task.baseline_score:.6g}" if task and task.baseline_score is not None else ""
        shown = "" if r.score is None else f"{r.score:.6g}" + (f" ± {r.spread:.2g}" if r.spread is not None else "")
        table.add_row(name, Text(r.status, style=STYLES.get(r.status, "yellow")), recorded, shown)
    console.print(table)
    # Reasons and fixes at full length, one paragraph each: a table cell would cut or fold them.
    for r in ordered:
        if r.detail:
            detail = neutral(r.detail, lines=True)  # it may end with the baseline's output
            line = Text.assemble((r.name, "bold"), f" ({r.status}): {detail}")
            console.print(line, highlight=False, soft_wrap=True)  # unbroken: commands in it are copied
    counts = {status: sum(r.status == status for r in results) for status in get_args(Status)}
    verdict = "FAILED" if demo_failed(results) else "ok"
    console.print(f"{verdict}: " + ", ".join(f"{n} {status}" for status, n in counts.items() if n))
