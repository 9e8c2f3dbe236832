"""`air standalone` with its output in a log file (no terminal): rich's bar draws nothing until the end, so
plain lines say how far each step got, before its `step N` line, and when a step is long one comes every
`every` seconds even while no rollout ends."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from air.runs.progress_lines import ProgressLines
from tests.printed_hints import REPO, env_without

NOT_A_TERMINAL = env_without("FORCE_COLOR", "TTY_COMPATIBLE", "TTY_INTERACTIVE", "COLUMNS")


def test_a_logged_run_says_how_far_each_step_got_before_its_step_line(tmp_path: Path) -> None:
    command = [sys.executable, "-m", "air.run_training", "standalone", "--env", "simple_env", "--steps", "2"]
    command += ["--batch-size", "8", "--rollouts-per-example", "2", "--output-dir", str(tmp_path / "run")]
    log = tmp_path / "stdout.log"
    with log.open("w") as out:  # a file, as `air standalone ... > run.out`
        done = subprocess.run(
            command, stdout=out, stderr=subprocess.PIPE, text=True, timeout=600, cwd=REPO, env=NOT_A_TERMINAL
        )
    assert done.returncode == 0, done.stderr
    lines = log.read_text().splitlines()
    step_started = 0  # where step 1's lines may begin
    for step in (1, 2):
        summary_at = next(i for i, line in enumerate(lines) if line.startswith(f"step {step:>3}  reward"))
        progress = [i for i, line in enumerate(lines) if line.startswith(f"step {step}/2: ")]
        # A quarter of the batch at a time; the last rollout's news is the step line itself.
        assert [lines[i].split(" after ")[0] for i in progress] == [
            f"step {step}/2: {n} of 8 rollouts done" for n in (2, 4, 6)
        ], lines
        assert all(step_started < i < summary_at for i in progress), lines
        step_started = summary_at


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_long_step_gets_a_line_every_interval_even_when_no_rollout_ends() -> None:
    clock, printed = Clock(), []
    lines = ProgressLines(printed.append, steps=2, batch_size=16, every=30.0, clock=clock)
    lines.start(heartbeat=False)  # ticks driven here, by a clock that moves only when told
    clock.now += 29.0
    lines.tick()
    assert printed == []
    clock.now += 1.0
    lines.tick()
    assert printed == ["step 1/2: 0 of 16 rollouts done after 30.0 s"]
    lines.rollout_done()
    clock.now += 20.0
    lines.tick()  # 20 s since the last line: nothing yet
    clock.now += 10.0
    lines.tick()
    assert printed[-1] == "step 1/2: 1 of 16 rollouts done after 60.0 s"
    for _ in range(3):
        lines.rollout_done()
    assert printed[-1] == "step 1/2: 4 of 16 rollouts done after 60.0 s"  # a quarter of the batch
    lines.step_done(1)
    clock.now += 30.0
    lines.tick()
    assert printed[-1] == "step 2/2: 0 of 16 rollouts done after 30.0 s"
    lines.step_done(2)
    clock.now += 300.0
    lines.tick()  # the run's steps are over: the closing table follows, no more lines
    assert len(printed) == 4
