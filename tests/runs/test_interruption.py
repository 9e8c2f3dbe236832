"""A run stopped part way keeps only true files (no Docker here; tests/runs/test_interrupted_run.py runs
`air standalone` and interrupts it for real): a rollout cut short records why and no reward, a folder
holding only such rollouts is not kept, the summary's census agrees with the folder, the viewer leaves
cut-short rollouts and their steps out of every number, and Ctrl-C waits for every rollout to record
itself before the run goes on to its summary."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from air.env.core import MLGymCore, RolloutLabels
from air.env.rollout import CANCELLED
from air.env.settings import MLGymEnvSettings
from air.env.trajectories import TrajectoryRecord, write_trajectory
from air.runs import interruption
from air.runs.interruption import GracefulInterrupt, census
from air.runs.run_folder import open_run_folder
from air.viewer import stats
from air.viewer.index import TrajectoryIndex
from rigs.patience import backstop
from rigs.synthetic_runs import synthetic_record


def _core(tmp_path: Path) -> MLGymCore:
    settings = MLGymEnvSettings(task_configs=["laneMerge"], save_trajectories=True, trajectory_dir=str(tmp_path))
    return MLGymCore(settings)


def _cut(core: MLGymCore) -> TrajectoryRecord:
    """A rollout with an evaluation behind it (its tracker would give a reward), then cancelled."""
    rollout = core.new_rollout("laneMerge", seed=1)
    rollout.tracker.record(rollout.task.baseline_score, suspicious=False)
    result = core.close(rollout, cancelled=True, error=None)
    assert result["reward"] is not None  # what the record used to carry: a reward for half a rollout
    return core.record(rollout, result, RolloutLabels(step=2), error=None)


def test_a_cancelled_rollout_records_its_cause_and_no_reward(tmp_path: Path) -> None:
    core = _core(tmp_path)
    record = _cut(core)
    assert (record.exit_status, record.reward, record.error) == ("cancelled", None, CANCELLED)
    core.cancel_cause = interruption.INTERRUPTED
    assert _cut(core).error == interruption.INTERRUPTED


def _records(folder: Path, statuses: list[str], step: int = 1) -> None:
    rng = random.Random(0)
    for member, status in enumerate(statuses):
        record = synthetic_record(rng, task="titanic", step=step, group=0, member=member, steps=3)
        write_trajectory(record.model_copy(update={"exit_status": status}), folder / "trajectories")


def test_a_folder_of_cancelled_rollouts_alone_is_not_kept(tmp_path: Path) -> None:
    folder = open_run_folder(tmp_path / "run", base=tmp_path)
    _records(folder.path, ["cancelled", "cancelled"])
    assert not folder.recorded_anything()
    folder.discard()
    assert not (tmp_path / "run").exists()

    kept = open_run_folder(tmp_path / "kept", base=tmp_path)
    _records(kept.path, ["cancelled", "submitted"])
    assert kept.recorded_anything()


def test_the_census_counts_the_unfinished_step_as_the_folder_holds_it(tmp_path: Path) -> None:
    _records(tmp_path, ["submitted"] * 4, step=1)
    _records(tmp_path, ["max_turns", "cancelled", "cancelled"], step=2)
    (tmp_path / "trajectories" / "titanic" / "torn.json").write_text("{")
    found = census(tmp_path / "trajectories")
    assert found.as_summary() == {"finished": 5, "cancelled": 2, "unreadable": 1}
    assert found.unfinished_step(steps_run=1) == {"step": 2, "finished": 1, "cancelled": 2}
    assert census(tmp_path / "none").unfinished_step(steps_run=3) is None


def test_the_viewer_leaves_cut_short_rollouts_and_their_step_out(tmp_path: Path) -> None:
    # An older record of a cancelled rollout carries a reward: the viewer must not believe it either.
    _records(tmp_path, ["submitted"] * 4, step=1)
    rng = random.Random(1)
    for member, status in enumerate(["submitted", "cancelled", "cancelled", "cancelled"]):
        record = synthetic_record(rng, task="titanic", step=2, group=0, member=member, steps=3)
        reward = -1.1 if status == "cancelled" else record.reward
        write_trajectory(record.model_copy(update={"exit_status": status, "reward": reward}), tmp_path / "trajectories")
    index = TrajectoryIndex(tmp_path).refresh()
    frame = stats.index_frame(index)
    assert frame.loc[frame["exit_status"] == "cancelled", "reward"].isna().all()
    assert len(stats.ended(frame)) == 5
    curve = stats.reward_per_step(stats.whole_steps(frame))
    assert list(curve["step"]) == [1]  # step 2 was cut short: no point, not a mean of its one finisher
    assert stats.zero_advantage_share(stats.whole_steps(frame))["step"].tolist() == [1]


def test_ctrl_c_waits_for_every_rollout_to_record_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    """The same Ctrl-C twice (the terminal signals the group and `uv run` forwards it) is one."""
    recorded: list[int] = []

    class Core:
        cancel_cause = None

    core = Core()

    async def rollout(n: int) -> None:
        try:
            await asyncio.sleep(60)
        except asyncio.CancelledError:
            await asyncio.sleep(0.05 * n)  # recording takes a while, longer for some
            recorded.append(n)
            raise

    async def run() -> tuple[bool, list[int]]:
        async with GracefulInterrupt(core) as interrupt:  # as the run does: settle before the summary
            loop = asyncio.get_running_loop()
            loop.call_later(0.2, os.kill, os.getpid(), signal.SIGINT)
            loop.call_later(0.2, os.kill, os.getpid(), signal.SIGINT)
            try:
                await asyncio.gather(*(rollout(n) for n in range(5)))
            finally:
                await interrupt.settle()
                seen = list(recorded)
        return interrupt.interrupted, seen

    before = signal.getsignal(signal.SIGINT)  # an earlier test may have loaded verifiers, which sets its own
    interrupted, seen_at_exit = asyncio.run(run())
    assert interrupted and sorted(seen_at_exit) == [0, 1, 2, 3, 4]
    assert core.cancel_cause == interruption.INTERRUPTED
    assert signal.getsignal(signal.SIGINT) is before


def test_a_second_ctrl_c_later_stops_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(interruption, "SAME_KEYPRESS_S", 0.0)

    async def run() -> None:
        async with GracefulInterrupt(None):
            loop = asyncio.get_running_loop()
            loop.call_later(0.1, os.kill, os.getpid(), signal.SIGINT)
            loop.call_later(0.3, os.kill, os.getpid(), signal.SIGINT)

            async def stubborn() -> None:  # a clean-up that outlasts the first Ctrl-C: the second gets out
                try:
                    await asyncio.sleep(60)
                except asyncio.CancelledError:
                    await asyncio.sleep(60)

            await asyncio.gather(stubborn())

    with pytest.raises(KeyboardInterrupt):
        asyncio.run(run())


# Ctrl-C while the summary is being written (both signals, as a terminal plus `uv run` send them): the
# summary is still written whole, and agrees with steps.jsonl.
CTRL_C_IN_THE_SUMMARY = """
import os, signal, sys
import air.runs.standalone as standalone

original = standalone._summary

def summary_under_ctrl_c(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
    return original(*args, **kwargs)

standalone._summary = summary_under_ctrl_c
from air.cli.main import main
sys.exit(main(sys.argv[1:]))
"""


def test_ctrl_c_during_the_summary_still_writes_it_whole(tmp_path: Path) -> None:
    out = tmp_path / "run"
    argv = ["standalone", "--env", "simple_env", "--steps", "2", "--batch-size", "4", "--output-dir", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", CTRL_C_IN_THE_SUMMARY, *argv],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        capture_output=True,
        text=True,
        timeout=backstop(120),
    )
    assert "Traceback" not in done.stderr and "never retrieved" not in done.stderr, done.stderr
    summary = json.loads((out / "summary.json").read_text())
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert summary["steps"] == steps and summary["steps_run"] == 2 and summary["status"] == "completed"
    assert done.returncode == 0, done.stdout + done.stderr  # nothing was left to interrupt
    assert not list(out.glob(".*.tmp"))
