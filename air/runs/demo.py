"""``air demo``: every task's baseline, reproduced in fresh sandboxes from a warm pool.

The end-to-end check of the foundation on a machine without GPUs: pool -> workspace layout ->
baseline run as the agent -> tamper-proof evaluation -> score against the recorded baseline.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from rich.console import Console
from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table

from air.sandbox.config import SandboxConfig
from air.sandbox.pool import SandboxPool
from air.tasks.loader import Task, load_task
from air.tasks.workspace import TaskWorkspace


@dataclass
class DemoResult:
    task: Task
    score: float | None
    error: str | None
    seconds: float

    @property
    def matches(self) -> bool:
        recorded = self.task.baseline_score
        return self.score is not None and recorded is not None and abs(self.score - recorded) <= 1e-3


async def reproduce_baseline(pool: SandboxPool, task: Task) -> DemoResult:
    loop = asyncio.get_running_loop()
    start = loop.time()
    sandbox = await pool.acquire()
    try:
        workspace = TaskWorkspace(task, sandbox)
        await workspace.setup()
        for script in task.config.baseline_paths:
            result = await sandbox.run(f"python {script}", timeout=task.training_timeout)
            if result.exit_code != 0:
                return DemoResult(task, None, f"{script} failed: {result.output[-500:]}", loop.time() - start)
        evaluation = await workspace.evaluate()
        return DemoResult(task, evaluation.score, evaluation.error, loop.time() - start)
    finally:
        pool.release(sandbox)


async def run_demo(names: list[str], task_root: str | None, config: SandboxConfig, console: Console) -> bool:
    tasks = [load_task(name, task_root) for name in names]
    results: list[DemoResult] = []
    progress = Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=console,
    )
    async with SandboxPool(config, size=min(len(tasks), 4)) as pool:
        with progress:
            bar = progress.add_task("reproducing baselines in sandboxes", total=len(tasks))

            async def one(task: Task) -> None:
                results.append(await reproduce_baseline(pool, task))
                progress.advance(bar)

            await asyncio.gather(*(one(task) for task in tasks))
    table = Table(title=f"Baselines reproduced in {config.resolved_image()}")
    table.add_column("task", no_wrap=True)
    for column in ("metric", "recorded", "reproduced", "", "time"):
        table.add_column(column, overflow="fold")
    for result in sorted(results, key=lambda r: r.task.name):
        task = result.task
        direction = "higher" if task.higher_is_better else "lower"
        shown = f"{result.score:.4f}" if result.score is not None else f"[red]{(result.error or '')[:60]}[/red]"
        table.add_row(
            task.name,
            f"{task.primary_metric} ({direction})",
            f"{task.baseline_score}",
            shown,
            "[green]ok[/green]" if result.matches else "[red]differs[/red]",
            f"{result.seconds:.1f}s",
        )
    console.print(table)
    return all(r.matches for r in results)
