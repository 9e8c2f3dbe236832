"""W&B logging of standalone runs, read back from the offline run's transaction log (``run-*.wandb``)."""

from __future__ import annotations

import json
import logging
import math
import struct
import sys
import zlib
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from air.env.trajectories import BaselineInfo, TrajectoryRecord, Turn, write_trajectory
from air.runs.standalone import StandaloneSettings, run_standalone
from air.runs.wandb_logging import MAX_COMMANDS_CHARS, SAMPLE_COLUMNS, WandbStepLogger, WandbUnavailable, sample_rows
from rigs.patience import backstop

# --- reading an offline run back ------------------------------------------------------------------
# wandb writes records in the LevelDB log format: a 7-byte file header (":W&B", magic 0xBEE1, version),
# then 32 KiB blocks of chunks, each with crc32 (seeded with the chunk type), length and type (full,
# first, middle, last); a block's tail shorter than a chunk header is zero padding. Each record is a
# wandb.proto Record message. Newer wandb releases have no Python reader for it, hence these lines.

BLOCK = 32 * 1024
CHUNK_HEADER = struct.Struct("<IHB")
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> Iterator[Any]:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    ident, magic, _version = struct.unpack("<4sHB", data[:7])
    assert (ident, magic) == (b":W&B", 0xBEE1), f"{path} is not a W&B transaction log"
    pos, pending = 7, b""
    while pos + CHUNK_HEADER.size <= len(data):
        left_in_block = BLOCK - pos % BLOCK
        if left_in_block < CHUNK_HEADER.size:
            pos += left_in_block
            continue
        crc, length, kind = CHUNK_HEADER.unpack_from(data, pos)
        if (crc, length, kind) == (0, 0, 0):  # padding, or the end of a log still being written
            pos += left_in_block
            continue
        chunk = data[pos + CHUNK_HEADER.size : pos + CHUNK_HEADER.size + length]
        assert zlib.crc32(chunk, zlib.crc32(bytes([kind]))) == crc, f"{path}: bad checksum at byte {pos}"
        pos += CHUNK_HEADER.size + length
        pending = chunk if kind in (FULL, FIRST) else pending + chunk
        if kind in (FULL, LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(pending)
            yield record


def _key(item: Any) -> str:
    return item.key or ".".join(item.nested_key)


class OfflineRun:
    def __init__(self, run_file: Path) -> None:
        self.dir = run_file.parent
        self.records = list(read_records(run_file))

    def of_type(self, kind: str) -> list[Any]:
        return [getattr(r, kind) for r in self.records if r.WhichOneof("record_type") == kind]

    @property
    def run(self) -> Any:
        [run] = self.of_type("run")
        return run

    def config(self) -> dict[str, Any]:
        return {u.key: json.loads(u.value_json) for u in self.run.config.update if u.key != "_wandb"}

    def history(self) -> dict[int, dict[str, Any]]:
        return {h.step.num: {_key(i): json.loads(i.value_json) for i in h.item} for h in self.of_type("history")}

    def summary(self) -> dict[str, Any]:
        folded: dict[str, Any] = {}
        for summary in self.of_type("summary"):
            folded.update({_key(u): json.loads(u.value_json) for u in summary.update})
        return folded

    def table(self, history_row: dict[str, Any]) -> list[dict[str, Any]]:
        table = json.loads((self.dir / "files" / history_row["samples.path"]).read_text())
        assert table["columns"] == SAMPLE_COLUMNS
        return [dict(zip(table["columns"], row, strict=True)) for row in table["data"]]


def offline_run(wandb_dir: Path, wait_s: float = backstop(30)) -> OfflineRun:
    """The offline run's transaction log, once wandb's background writer has put the run and its exit
    record on disk (``run.finish`` can return before; under load the test read a log without them)."""
    import time

    deadline = time.monotonic() + wait_s
    while True:
        files = list(wandb_dir.glob("wandb/offline-run-*/run-*.wandb"))
        if len(files) == 1:
            try:
                run = OfflineRun(files[0])
            except AssertionError:  # a chunk still being written
                if time.monotonic() > deadline:
                    raise
                run = None
            if run is not None and ((run.of_type("run") and run.of_type("exit")) or time.monotonic() > deadline):
                return run
        elif time.monotonic() > deadline:
            [run_file] = files
        time.sleep(0.2)


# --- fixtures -------------------------------------------------------------------------------------


@pytest.fixture(autouse=True)
def wandb_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Offline W&B with every file in tmp_path; the test runs in an empty cwd that must stay empty."""
    import os

    for var in [v for v in os.environ if v.startswith("WANDB_")]:
        monkeypatch.delenv(var)
    home = tmp_path / "wandb-home"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    for var in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(var, str(home / var.lower()))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    monkeypatch.chdir(cwd)
    yield cwd
    if "wandb" in sys.modules and sys.modules["wandb"] is not None:
        sys.modules["wandb"].teardown()  # wandb keeps the env it first saw in a process-wide singleton


def dial_settings(out: Path, steps: int = 2, batch_size: int = 4) -> StandaloneSettings:
    return StandaloneSettings(
        env="simple_env",
        steps=steps,
        batch_size=batch_size,
        rollouts_per_example=2,
        policy="noisy",
        output_dir=str(out),
    )


class Recorder:
    """A second StepLogger: keeps the raw groups each step produced, to check the table against."""

    def __init__(self) -> None:
        self.groups: dict[int, list[list[dict[str, Any]]]] = {}
        self.finished: list[dict[str, Any] | None] = []

    def start(self, settings: StandaloneSettings, output_dir: Path) -> None:
        pass

    def log_step(self, stats: dict[str, Any], groups: list[list[dict[str, Any]]]) -> None:
        self.groups[stats["step"]] = groups

    def finish(self, summary: dict[str, Any] | None) -> None:
        self.finished.append(summary)


def same(a: Any, b: Any) -> bool:
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return a == pytest.approx(b, abs=1e-12) if isinstance(b, float) else a == b


# --- tests ----------------------------------------------------------------------------------------


async def test_steps_samples_config_and_summary_reach_wandb(tmp_path: Path, wandb_env: Path):
    pytest.importorskip("wandb")
    out = tmp_path / "run"
    settings = dial_settings(out)
    recorder = Recorder()
    summary = await run_standalone(settings, loggers=[WandbStepLogger(name="dial-check", table_every=1), recorder])

    run = offline_run(out)  # under the output dir, since WANDB_DIR is not set
    assert list(wandb_env.iterdir()) == []
    assert run.run.project == "air-agent" and run.run.display_name == "dial-check"
    assert run.config() == settings.model_dump(mode="json")

    history = run.history()
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    assert sorted(history) == [s["step"] for s in steps] == [1, 2]
    for stats in steps:
        logged = history[stats["step"]]
        for key, value in stats.items():
            if key != "step" and not isinstance(value, dict):  # masked_causes: in the samples table
                assert same(logged[f"standalone/{key}"], value), key

    on_disk = json.loads((out / "summary.json").read_text())
    logged_summary = run.summary()
    for key in ("reward_mean_first_step", "reward_mean_last_step", "rollouts", "masked", "seconds", "output_dir"):
        assert same(logged_summary[f"summary/{key}"], on_disk[key]), key
    assert logged_summary["summary/rollouts"] == summary["rollouts"] == 8

    rows = run.table(history[2])  # the table logged at the last step holds every sampled rollout
    assert len(run.table(history[1])) == 2  # table_every=1: the first step's table too
    expected = [o for step in (1, 2) for o in recorder.groups[step][0]]  # the first group of each step
    assert len(rows) == len(expected) == 4
    for row, output in zip(rows, expected, strict=True):
        group = next(g for g in recorder.groups[row["step"]] if output in g)
        mean = sum(o["reward"] for o in group) / len(group)
        assert row["group_id"] == output["info"]["group_id"] == f"{row['step']}-0"
        assert (row["task"], row["policy"], row["example_id"]) == ("dial", "noisy", output["example_id"])
        assert row["reward"] == pytest.approx(output["reward"])
        assert row["advantage"] == pytest.approx(output["reward"] - mean)
        for metric in ("baseline_score", "best_score", "final_score", "turns", "validates"):
            assert row[metric] == pytest.approx(output["metrics"][metric]), metric
        assert row["stop_condition"] == output["stop_condition"]
        assert (row["exit_status"], row["trajectory"], row["error"]) == (None, None, None)  # simple_env has none
        # One command per reply that the env did not answer with a format error, validates among them.
        completion = output["completion"]
        answered = [
            completion[i + 1]["content"]
            for i, m in enumerate(completion[:-1])
            if m["role"] == "assistant" and completion[i + 1]["role"] == "user"
        ]
        commands = row["commands"].splitlines() if row["commands"] else []
        assert len(commands) == sum(not text.startswith("Format error") for text in answered)
        assert commands.count("$ validate") == row["validates"]
    assert recorder.finished == [summary]


async def test_wandb_env_vars_choose_dir_and_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path / "elsewhere"))
    monkeypatch.setenv("WANDB_PROJECT", "from-env")
    out = tmp_path / "run"
    await run_standalone(dial_settings(out, steps=1, batch_size=2), loggers=[WandbStepLogger()])
    assert not (out / "wandb").exists()
    run = offline_run(tmp_path / "elsewhere")
    assert run.run.project == "from-env"
    assert run.history()[1]["standalone/rollouts"] == 2


async def test_a_failed_run_is_finished_as_failed_on_wandb(tmp_path: Path):
    pytest.importorskip("wandb")
    out = tmp_path / "run"

    done: list[None] = []

    def fail_in_second_step() -> None:
        done.append(None)
        if len(done) > 4:  # the first step's 4 rollouts went through
            raise RuntimeError("stopped by the test")

    recorder = Recorder()
    loggers = [WandbStepLogger(), recorder]
    with pytest.raises(RuntimeError, match="stopped by the test"):
        await run_standalone(dial_settings(out), on_rollout=fail_in_second_step, loggers=loggers)
    assert recorder.finished == [None]
    run = offline_run(out)
    [exit_record] = run.of_type("exit")
    assert exit_record.exit_code == 1
    history = run.history()
    assert sorted(history) == [1]
    assert len(run.table(history[1])) == 2  # the rollouts sampled before the failure still show


async def test_a_failing_wandb_costs_only_the_wandb_copy(tmp_path: Path, monkeypatch, caplog):
    pytest.importorskip("wandb")
    # Online without an API key: wandb.init refuses. HOME has no .netrc; no server is reachable.
    monkeypatch.setenv("WANDB_MODE", "online")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")
    out = tmp_path / "run"
    logger = WandbStepLogger()
    with caplog.at_level(logging.WARNING, logger="air.runs.wandb_logging"):
        summary = await run_standalone(dial_settings(out), loggers=[logger])
    assert not logger.active
    assert any("wandb.init failed" in r.getMessage() for r in caplog.records)
    assert summary["rollouts"] == 8
    assert json.loads((out / "summary.json").read_text())["rollouts"] == 8
    assert len((out / "steps.jsonl").read_text().splitlines()) == 2


def test_without_wandb_the_logger_names_the_fix(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(sys.modules, "wandb", None)  # `import wandb` now raises ImportError
    with pytest.raises(WandbUnavailable, match=r"pip install 'air-mlgym\[wandb\]'"):
        WandbStepLogger()


def _record(tmp_path: Path, commands: list[str | None], exit_status: str) -> Path:
    turns = [
        Turn(index=i + 1, model_text="reply", command=c, format_error=None if c else "no command")
        for i, c in enumerate(commands)
    ]
    record = TrajectoryRecord(
        id="a1b2c3d4e5f6",
        task="laneMerge",
        started_at=datetime(2026, 1, 2, tzinfo=UTC),
        exit_status=exit_status,
        baseline=BaselineInfo(metric="score", score=0.5),
        metrics={"best_score": 0.95},
        turns=turns,
    )
    return write_trajectory(record, tmp_path / "trajectories")


def test_sample_rows_read_exit_status_and_commands_from_the_trajectory_file(tmp_path: Path):
    long_command = "echo " + "x" * MAX_COMMANDS_CHARS
    path = _record(tmp_path, ["validate", None, long_command, "submit"], exit_status="submitted")
    info = {"step": 3, "group_id": "3-1", "policy": None, "task_name": "laneMerge"}
    saved = {
        "task": "air_mlgym",  # as prime-rl's EnvGroup leaves it
        "example_id": 7,
        "info": info,
        "reward": 0.75,
        "metrics": {"laneMerge/final_score": 0.9, "turns": 4.0, "validates": 1.0},
        "stop_condition": "has_final_env_response",
        "trajectory_path": str(path),
        "error": None,
    }
    other = {**saved, "reward": 0.25, "trajectory_path": None, "completion": None}
    lost = "Docker engine unreachable at unix:///var/run/docker.sock: the container and the work in it were lost"
    chain = f"SandboxError({lost!r}) -> EnvFault({lost!r})"
    error = {"error": "SandboxError", "error_chain_repr": chain, "error_chain_str": "SandboxError -> EnvFault"}
    masked = {**saved, "reward": 0.0, "trajectory_path": None, "error": error}
    first, second, third = sample_rows([saved, other, masked])

    assert (first.step, first.group_id, first.example_id, first.policy, first.task) == (3, "3-1", 7, None, "laneMerge")
    assert first.exit_status == "submitted" and first.trajectory == str(path)
    assert first.commands is not None and first.commands.startswith("$ validate\n$ echo xxx")
    assert first.commands.endswith("more characters]") and len(first.commands) < MAX_COMMANDS_CHARS + 40
    assert (first.turns, first.validates, first.final_score, first.best_score) == (4, 1, 0.9, 0.95)
    assert first.advantage == pytest.approx(0.25) and second.advantage == pytest.approx(-0.25)
    assert second.exit_status is None and second.commands is None and second.best_score is None
    assert third.advantage is None and third.error == lost  # the cause, not the exception's type


def test_air_standalone_wandb_flag_logs_steps_and_samples(tmp_path: Path, wandb_env: Path):
    """The command line a user types: `air standalone --wandb ...` (offline here)."""
    pytest.importorskip("wandb")
    from air.cli.main import main

    out = tmp_path / "cli-run"
    argv = ["standalone", "--env", "simple_env", "--steps", "2", "--batch-size", "4", "--rollouts-per-example", "2"]
    argv += ["--output-dir", str(out), "--wandb", "--wandb-project", "air-cli", "--wandb-name", "cli"]
    assert main(argv) == 0
    run = offline_run(out)
    assert (run.run.project, run.run.display_name) == ("air-cli", "cli")
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    history = run.history()
    assert [history[s["step"]]["standalone/reward_mean"] for s in steps] == pytest.approx(
        [s["reward_mean"] for s in steps]
    )
    assert len(run.table(history[2])) == 4  # the first group (2 rollouts) of each of the 2 steps
