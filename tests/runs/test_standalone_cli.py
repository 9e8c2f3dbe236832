"""`air standalone` as a new user meets it: a folder of its own per run, refused when reused, nothing
left by a failed start, errors that name the cause, steps counted one way everywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from air.cli.main import main
from air.env.trajectory_reader import iter_trajectory_paths, load_trajectory
from air.runs.run_folder import RunFolderError, open_run_folder
from air.runs.standalone_settings import SIMPLE_ENV_TASK
from rigs.patience import backstop


def _air(*args: str, cwd: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "air.run_training", *args],
        cwd=cwd,
        env={**os.environ, "COLUMNS": "400"},  # rich wraps at the terminal's width: keep paths on one line
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _strict_json(text: str) -> object:
    def no_constants(name: str) -> None:
        raise AssertionError(f"{name} is not JSON")

    return json.loads(text, parse_constant=no_constants)


def test_simple_env_task_is_the_one_simple_env_plays() -> None:
    import simple_env

    assert SIMPLE_ENV_TASK == simple_env.TASK


def test_two_runs_started_together_keep_separate_complete_folders(tmp_path: Path) -> None:
    argv = ["standalone", "--env", "simple_env", "--steps", "5", "--batch-size", "4", "--rollouts-per-example", "2"]
    first, second = _air(*argv, cwd=tmp_path), _air(*argv, cwd=tmp_path)  # the same second, as a user's two shells
    outputs = [proc.communicate(timeout=backstop(240)) for proc in (first, second)]
    assert first.returncode == 0 and second.returncode == 0, outputs
    runs = sorted((tmp_path / "outputs" / "standalone").iterdir())
    assert len(runs) == 2, f"two runs must get two folders: {runs}"
    for run in runs:
        steps = (run / "steps.jsonl").read_text().splitlines()
        assert [json.loads(line)["step"] for line in steps] == [1, 2, 3, 4, 5]
        summary = _strict_json((run / "summary.json").read_text())
        assert summary["output_dir"] == str(run) and summary["rollouts"] == 20
    for run in runs:  # each run said where its folder is, at the start
        assert sum(f"run folder: {run}\n" in stdout for stdout, _ in outputs) == 1, outputs


def test_a_default_folder_is_unique_even_within_one_second(tmp_path: Path) -> None:
    folders = {open_run_folder(None, base=tmp_path / "runs").path for _ in range(20)}
    assert len(folders) == 20
    assert all((folder / "run.log").exists() for folder in folders), "each folder is claimed by its run"


def test_a_reused_folder_is_refused_and_left_as_it_was(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "run"
    argv = ["standalone", "--env", "simple_env", "--steps", "2", "--batch-size", "2", "--rollouts-per-example", "2"]
    assert main([*argv, "--output-dir", str(out)]) == 0
    before = {p: p.read_bytes() for p in out.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main([*argv, "--steps", "1", "--output-dir", str(out)]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not empty" in err and "--overwrite" in err, err
    assert {p: p.read_bytes() for p in out.iterdir() if p.is_file()} == before, "the first run must be untouched"
    # Asked to, it replaces the run: one step now, not two.
    assert main([*argv, "--steps", "1", "--output-dir", str(out), "--overwrite"]) == 0
    assert len((out / "steps.jsonl").read_text().splitlines()) == 1


def test_overwrite_never_removes_what_is_not_a_run(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunFolderError, match="not a run"):
        open_run_folder(tmp_path, base=tmp_path, overwrite=True)
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_two_runs_given_one_empty_folder_cannot_both_have_it(tmp_path: Path) -> None:
    open_run_folder(tmp_path / "run", base=tmp_path)
    with pytest.raises(RunFolderError):
        open_run_folder(tmp_path / "run", base=tmp_path)


@pytest.mark.parametrize(
    "bad",
    [
        ["--task", "nosuch"],
        ["--policy", "clever"],
        ["--env-arg", "task_configs=[laneMerge"],
        ["--env-arg", "nosuch_argument=3"],
        ["--env", "simple_env", "--task", "nosuch"],
        ["--env", "simple_env", "--env-arg", "num_exampels=3"],
    ],
)
def test_a_failed_start_is_one_line_and_leaves_no_folder(
    bad: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(["standalone", "--steps", "1", *bad]) == 1
    err = capsys.readouterr().err
    assert err.startswith("air: error:") and "Traceback" not in err, err
    assert not (tmp_path / "outputs").exists(), sorted(str(p) for p in tmp_path.rglob("*"))


def test_bad_json_in_an_env_arg_is_an_error_and_a_bare_word_a_string(capsys: pytest.CaptureFixture[str]) -> None:
    from air.cli.runs import parse_env_arg

    assert parse_env_arg("task_root=/data/mlgym") == ("task_root", "/data/mlgym")
    assert parse_env_arg('task_configs=["laneMerge"]') == ("task_configs", ["laneMerge"])
    assert main(["standalone", "--env-arg", "task_configs=[laneMerge"]) == 1
    assert "not valid JSON" in capsys.readouterr().err


def test_simple_env_says_what_it_plays_and_writes(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = _air("standalone", "--env", "simple_env", "--steps", "1", "--output-dir", str(out), cwd=tmp_path)
    stdout, stderr = proc.communicate(timeout=backstop(240))
    assert proc.returncode == 0, stderr
    text = stdout
    assert f"on {SIMPLE_ENV_TASK} against" in text and "laneMerge" not in text
    assert "trajectories/" not in text, "simple_env writes no trajectories: the closing line must not promise them"
    summary = _strict_json((out / "summary.json").read_text())
    assert summary["settings"]["tasks"] == [SIMPLE_ENV_TASK]


class _DiesAfterListing(BaseHTTPRequestHandler):
    """Answers the one listing a run asks before it starts, then stops listening: dead for every rollout."""

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        payload = json.dumps({"object": "list", "data": [{"id": "default", "object": "model"}]}).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()
        self.server.shutdown()  # from this handler's thread: serve_forever runs in another
        self.server.server_close()

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.docker
@pytest.mark.timeout(300)
def test_an_endpoint_dead_after_the_start_names_its_cause_and_writes_no_nan(tmp_path: Path, docker_image: str) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _DiesAfterListing)
    port = server.server_address[1]
    threading.Thread(target=server.serve_forever, daemon=True).start()
    out = tmp_path / "run"
    proc = _air(
        "standalone",
        *("--steps", "1", "--batch-size", "2", "--rollouts-per-example", "2", "--output-dir", str(out)),
        *("--base-url", f"http://127.0.0.1:{port}/v1", "--env-arg", f"image={docker_image}"),
        cwd=tmp_path,
    )
    stdout, stderr = proc.communicate(timeout=backstop(280))
    assert proc.returncode == 1, stdout + stderr  # every rollout masked
    records = [load_trajectory(p) for p in iter_trajectory_paths(out / "trajectories")]
    assert len(records) == 2
    for record in records:
        assert record.error and "Connect" in record.error and str(port) in record.error, record.error
    for name in ("summary.json", "steps.jsonl"):
        for line in (out / name).read_text().splitlines() if name.endswith("l") else [(out / name).read_text()]:
            _strict_json(line)
    text = stdout
    assert "zero-adv groups -" in text, "no group was trained on: its share is unknown, not 0.00"
    assert "Connect" in text, "the console names why the rollouts were masked"


@pytest.mark.docker
@pytest.mark.timeout(300)
@pytest.mark.xdist_group("recorded_run")
def test_trajectories_carry_their_step_and_advantage(recorded_run: Path) -> None:
    out = recorded_run  # `air standalone` with its defaults (laneMerge, noisy), 2 steps of 4 in groups of 2
    records = [load_trajectory(p) for p in iter_trajectory_paths(out / "trajectories")]
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert [s["step"] for s in steps] == [1, 2] and sorted({r.step for r in records}) == [1, 2]
    groups: dict[str, list] = {}
    for record in records:
        assert record.group_id.startswith(f"{record.step}-")
        groups.setdefault(record.group_id, []).append(record)
    assert len(groups) == 4
    for members in groups.values():
        mean = sum(r.reward for r in members) / len(members)
        for record in members:
            assert record.advantage == pytest.approx(record.reward - mean)
