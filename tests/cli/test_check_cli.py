"""`air check`, `air clean` as a user runs them: the real CLI, real Docker, real processes, the real
scripted inference server on loopback; only nvidia-smi is faked (no GPU here), as a small executable."""

from __future__ import annotations

import json
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from air.cli.main import main
from air.launch.process_records import record_launch
from air.policies.scripted import make_policy
from air.serving.server import PolicyServer
from rigs.patience import backstop

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs" / "mlgym"


def check_rows(capsys, *argv: str) -> tuple[int, dict[str, list[dict[str, str]]]]:
    code = main(["check", "--json", *argv])
    rows: dict[str, list[dict[str, str]]] = {}
    for row in json.loads(capsys.readouterr().out):
        rows.setdefault(row["check"], []).append(row)
    return code, rows


@pytest.fixture(autouse=True)
def isolated(monkeypatch, tmp_path):
    monkeypatch.delenv("MLGYM_ROOT", raising=False)
    monkeypatch.delenv("PRIME_RL_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # no ~/prime-rl
    monkeypatch.setenv("PATH", "/usr/bin:/bin")  # no nvidia-smi (there is none here anyway)


def fake_nvidia_smi(tmp_path: Path, gpus: int, busy: dict[int, int]) -> str:
    """An nvidia-smi printing `gpus` H100s; `busy` maps GPU index -> a real PID holding 70 GB there."""
    uuids = [f"GPU-{i:08d}-0000-0000-0000-000000000000" for i in range(gpus)]
    gpu_csv = "".join(
        f"{i}, {u}, NVIDIA H100 80GB HBM3, 81559, {72000 if i in busy else 5}, 550.54.15\n" for i, u in enumerate(uuids)
    )
    apps_csv = "".join(f"{uuids[i]}, {pid}, 72000\n" for i, pid in busy.items())
    path = tmp_path / "nvidia-smi"
    path.write_text(
        textwrap.dedent(
            f"""\
            #!{sys.executable}
            import sys
            query = sys.argv[1]
            sys.stdout.write({gpu_csv!r} if query.startswith("--query-gpu=") else {apps_csv!r})
            """
        )
    )
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


def test_debug_config_on_this_machine_checks_all_but_the_gpus(capsys, docker_image):
    code, rows = check_rows(capsys, "--config", str(CONFIGS / "rl_debug.toml"))
    assert rows["config"][0]["status"] == "pass"
    assert rows["docker"][0]["status"] == "pass" and rows["sandbox image"][0]["status"] == "pass"
    gpus = rows["gpus"][0]
    assert gpus["status"] == "n/a" and "no NVIDIA GPU on this machine" in gpus["detail"]
    assert "trainer 2,3,4,5,6" in gpus["detail"] and "mlgym-titanic 7" in gpus["detail"]
    # titanic is an MLGym task and no checkout is configured: named, with the fix, and exit 1.
    assert rows["task titanic"][0]["status"] == "fail" and "MLGYM_ROOT" in rows["task titanic"][0]["fix"]
    assert rows["load mlgym-titanic"][0]["status"] == "n/a"
    assert rows["prime-rl"][0]["status"] == "warn"
    assert code == 1


def test_two_gpu_config_passes_everything_it_can_check_here(capsys, docker_image):
    code, rows = check_rows(capsys, "--config", str(CONFIGS / "rl_2gpu.toml"))
    failed = [r for group in rows.values() for r in group if r["status"] == "fail"]
    assert failed == []
    assert [r["status"] for r in rows["load builtin-lane-merge"]] == ["pass"]
    assert {r["check"] for group in rows.values() for r in group} >= {"task laneMerge", "task loanDefault"}
    assert code == 0


def test_misspelled_key_and_overlapping_gpus_fail_with_key_and_gpus_named(capsys, tmp_path, docker_image):
    text = (CONFIGS / "rl_2gpu.toml").read_text()
    text = text.replace("rollouts_per_example = 4", "rollout_per_example = 4")
    text = text.replace("trainer_gpu_ids = [1]", "trainer_gpu_ids = [0, 1]")
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    code, rows = check_rows(capsys, "--config", str(bad))
    details = [r["detail"] for r in rows["config"]]
    assert code == 1
    assert any(
        "orchestrator.rollout_per_example: unknown key (did you mean 'rollouts_per_example'?)" in d for d in details
    )
    assert any("GPU 0 assigned to both inference (0) and trainer (0,1)" in d for d in details)
    assert all(str(bad) in d for d in details)


def test_gpu_layout_against_nvidia_smi_names_the_holder_and_never_kills(capsys, tmp_path, docker_image):
    holder = subprocess.Popen(["sleep", "60"])
    try:
        smi = fake_nvidia_smi(tmp_path, gpus=2, busy={1: holder.pid})
        code, rows = check_rows(capsys, "--config", str(CONFIGS / "rl_2gpu.toml"), "--nvidia-smi", smi)
        assert rows["gpus"][0]["status"] == "pass" and "2 × NVIDIA H100" in rows["gpus"][0]["detail"]
        layout = {r["status"]: r for r in rows["gpu layout"]}
        assert "inference: GPU 0 free" in layout["pass"]["detail"]
        assert f"pid {holder.pid}" in layout["fail"]["detail"] and "sleep 60" in layout["fail"]["detail"]
        assert code == 1
        assert holder.poll() is None  # reported, not touched
    finally:
        holder.kill()
        holder.wait()


def test_eight_gpu_config_on_a_four_gpu_node_names_the_missing_gpus(capsys, tmp_path, docker_image):
    smi = fake_nvidia_smi(tmp_path, gpus=4, busy={})
    code, rows = check_rows(capsys, "--config", str(CONFIGS / "rl.toml"), "--nvidia-smi", smi)
    missing = [r["detail"] for r in rows["gpu layout"] if r["status"] == "fail"]
    assert any("trainer" in d and "4" in d and "0-3" in d for d in missing), missing
    assert code == 1


def test_endpoint_is_probed_with_the_real_client_path(capsys, docker_image):
    with PolicyServer(make_policy("baseline")) as server:
        _, rows = check_rows(capsys, "--endpoint", server.base_url)
    (row,) = rows["inference endpoint"]
    assert row["status"] == "pass" and server.model_name in row["detail"]
    _, rows = check_rows(capsys, "--endpoint", "http://127.0.0.1:9/v1")  # nothing listens on port 9
    assert rows["inference endpoint"][0]["status"] == "fail"


def test_leftovers_of_a_recorded_run_are_reported_and_cleaned(capsys, tmp_path, docker_image, monkeypatch):
    # Containers are not this test's business: under a host name of its own, `air clean --yes` leaves other
    # runs' orphans on this host alone, and they never turn its last `leftovers` row into a warning.
    monkeypatch.setattr(socket, "gethostname", lambda: f"pytest-check-{os.getpid()}")
    # A recorded launcher that exited and left a child behind, as a crashed `rl` leaves vLLM workers.
    script = "import subprocess, sys; p = subprocess.Popen(['sleep', '120']); print(p.pid, flush=True)"
    root = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, start_new_session=True)
    record_launch(root.pid, "rl", ["fake-rl"], tmp_path)
    leftover = int(root.stdout.readline())
    root.wait()
    bystander = subprocess.Popen(["sleep", "120"])  # same command, not recorded: never touched
    try:
        _, rows = check_rows(capsys, "--config", str(CONFIGS / "rl_2gpu.toml"))
        (row,) = rows["leftovers"]
        assert row["status"] == "warn" and "1 process(es) left by run" in row["detail"]

        assert main(["clean"]) == 0  # shows, does nothing
        shown = capsys.readouterr().out
        assert str(leftover) in shown and "air clean --yes" in shown
        assert Path(f"/proc/{leftover}").exists()

        assert main(["clean", "--yes", "--grace", "2"]) == 0
        assert "terminated" in capsys.readouterr().out
        assert not Path(f"/proc/{leftover}").exists() or "Z" in Path(f"/proc/{leftover}/stat").read_text().split()[2]
        assert bystander.poll() is None
        _, rows = check_rows(capsys, "--config", str(CONFIGS / "rl_2gpu.toml"))
        assert rows["leftovers"][0]["status"] == "pass"
    finally:
        bystander.kill()
        bystander.wait()


def test_piped_output_is_one_finding_per_line_at_full_width(tmp_path):
    """In a CI log or a pipe there is no terminal: no 80-column table splitting key names and paths."""
    bad = tmp_path / ("a-config-folder-with-a-long-name-" * 3) / "bad.toml"
    bad.parent.mkdir()
    bad.write_text(
        (CONFIGS / "rl_2gpu.toml").read_text().replace("rollouts_per_example = 4", "rollout_per_example = 4")
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "COLUMNS": "80", "AIR_STATE_DIR": str(tmp_path / "s")}
    result = subprocess.run(
        [sys.executable, "-m", "air.run_training", "check", "--config", str(bad)],
        capture_output=True,
        text=True,
        env=env,
        timeout=backstop(300),
    )
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    (finding,) = [line for line in lines if "rollout_per_example" in line]
    assert finding.startswith("fail  config: ") and str(bad) in finding
    assert "orchestrator.rollout_per_example: unknown key (did you mean 'rollouts_per_example'?)" in finding
    assert "┃" not in result.stdout and "│" not in result.stdout  # no table
    assert lines[-1].startswith("not ready: ") and "fail" in lines[-1]


def test_on_a_terminal_the_findings_are_a_table() -> None:
    import io

    from rich.console import Console

    from air.launch.preflight_rows import CheckRow
    from air.launch.preflight_view import render_rows

    out = io.StringIO()
    render_rows(Console(file=out, force_terminal=True, width=100), [CheckRow("docker", "pass", "engine answers")])
    assert "air check" in out.getvalue() and "│" in out.getvalue()
