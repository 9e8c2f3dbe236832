"""ridgePenalty, the built-in task scored by one number the agent sets (no Docker: the task's own scripts run
with this interpreter in a workspace laid out as the runtime lays it out; in a container: tests/tasks'
runtime tests and `air demo`)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.tasks.test_builtin_tasks import SUBPROCESS_TIMEOUT, TASK_ROOT, lay_out, run_script

GENERATOR = TASK_ROOT / "generators" / "ridgePenalty.py"
DATA = TASK_ROOT / "data" / "ridgePenalty" / "data"


def score(workspace, text: str, seed: str | None = None) -> subprocess.CompletedProcess:
    (workspace / "submission.csv").write_text(text)
    env = {"PATH": "/usr/bin:/bin", **({"AIR_EVAL_SEED": seed} if seed else {})}
    return subprocess.run(
        [sys.executable, "evaluate.py", "--submission_file", "submission.csv"],
        cwd=workspace, capture_output=True, text=True, timeout=SUBPROCESS_TIMEOUT, env=env,
    )  # fmt: skip


def r2(done: subprocess.CompletedProcess) -> float:
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)["r2"]


def test_the_generator_reproduces_the_committed_data(tmp_path):
    done = subprocess.run([sys.executable, str(GENERATOR), "--out", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    for name in ("train.csv", "heldout.csv"):
        assert (tmp_path / name).read_bytes() == (DATA / name).read_bytes(), name


def test_the_starter_is_the_baseline_and_the_score_peaks_inside_the_range(tmp_path):
    workspace = lay_out("ridgePenalty", tmp_path / "ws")
    assert (workspace / "submission.csv").read_text().strip() == "100"
    assert r2(run_script(workspace, "evaluate.py", "--submission_file", "submission.csv")) == 0.5086
    curve = {alpha: r2(score(workspace, alpha)) for alpha in ("0", "1", "10", "100", "1000")}
    # both ends lose: no penalty overfits, a heavy one flattens the fit; the middle beats the baseline
    assert curve["10"] > curve["1"] > curve["0"] and curve["10"] > curve["100"] > curve["1000"], curve
    assert curve["10"] - curve["100"] > 0.15, curve


def test_a_header_line_is_allowed_and_the_seed_resamples_the_held_out_rows(tmp_path):
    workspace = lay_out("ridgePenalty", tmp_path / "ws")
    assert r2(score(workspace, "alpha\n10\n")) == r2(score(workspace, "10"))
    seeded = [r2(score(workspace, "10", seed)) for seed in ("1", "2", "3")]
    assert len(set(seeded)) == 3 and all(abs(s - r2(score(workspace, "10"))) < 0.1 for s in seeded), seeded
    assert r2(score(workspace, "10", "7")) == r2(score(workspace, "10", "7"))  # the same seed, the same rows


@pytest.mark.parametrize(
    "text, fragment",
    [("abc", "is not one"), ("1 2", "is not one"), ("1,2", "exactly one number"), ("", "exactly one number"),
     ("-1", "from 0 to"), ("nan", "from 0 to"), ("1e13", "from 0 to")],
)  # fmt: skip
def test_a_submission_that_is_not_one_penalty_fails_with_the_reason(tmp_path, text, fragment):
    done = score(lay_out("ridgePenalty", tmp_path / "ws"), text)
    assert done.returncode != 0 and done.stdout == "" and fragment in done.stderr, done.stderr


def test_without_the_hidden_rows_there_is_no_score(tmp_path):
    workspace = lay_out("ridgePenalty", tmp_path / "ws")
    (workspace / "data" / "heldout.csv").unlink()
    done = score(workspace, "10")
    assert done.returncode != 0 and "heldout.csv was not found" in done.stderr
