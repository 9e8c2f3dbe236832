"""air/launch/rl_progress.py: the orchestrator's step summaries of either pin, followed as the log grows."""

from __future__ import annotations

import io
import os
import time

from air.launch.rl_progress import StepLines, step_report

C87 = "\x1b[32m00:51:11\x1b[0m SUCCESS Step 0 | Time: 88.38s | Reward: -0.0342 | Throughput: 53.0 tokens/s"
V1 = "01:26:32 SUCCESS Step 2 |   34.7s | Reward -0.3114 | Trainable 4/4 (100.0%) | Turns 2.0 | Branches 1.2"


def test_both_pins_wordings_and_nothing_else():
    assert step_report(C87).line() == "rl: step 0 | reward -0.0342 | 88.38s"
    assert step_report(V1).line() == "rl: step 2 | reward -0.3114 | trainable 4/4 | 34.7s"
    trainer = "[default0]:00:56:13 SUCCESS Step 0 | Time: 441.47s | Loss: 0.0000 | Grad. Norm: 0.0000"
    assert step_report(trainer) is None and step_report("01:25:47 INFO Train batch 0/4 (0.0%)") is None


def test_a_log_followed_as_it_grows_prints_each_step_once(tmp_path):
    since = time.time() - 1
    out = io.StringIO()
    log = tmp_path / "logs" / "orchestrator.stdout"  # c87c19b's place
    log.parent.mkdir()
    lines = StepLines(tmp_path, since, out)
    log.write_text(C87 + "\n" + V1[:30])  # the second line still being written
    lines.poll()
    assert out.getvalue() == "rl: step 0 | reward -0.0342 | 88.38s\n"
    with open(log, "a") as file:
        file.write(V1[30:] + "\n" + C87 + "\n")  # the rest, and step 0 again: printed once
    lines.poll()
    assert out.getvalue().splitlines() == ["rl: step 0 | reward -0.0342 | 88.38s",
                                           "rl: step 2 | reward -0.3114 | trainable 4/4 | 34.7s"]  # fmt: skip


def test_an_older_runs_log_is_not_this_runs(tmp_path):
    log = tmp_path / "run" / "logs" / "attempt_1" / "orchestrator.log"  # today's place
    log.parent.mkdir(parents=True)
    log.write_text(V1 + "\n")
    os.utime(log, (time.time() - 3600, time.time() - 3600))
    out = io.StringIO()
    StepLines(tmp_path, time.time() - 1, out).poll()
    assert out.getvalue() == ""
