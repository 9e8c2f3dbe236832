"""Our warnings inside vf-eval 0.4.0: they go where it sends verifiers' own records (loguru: its eval.log,
and the console with --no-rich), never 'No handlers could be found for logger "air.sandbox.storage"',
which is all Python says once vf-eval's dashboard has switched the last-resort handler off."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from air.sandbox.storage import can_size, storage_driver
from air.serving.server import PolicyServer
from rigs.patience import backstop

SETUP = "import sys; from verifiers.v1.utils.logging import setup_logging; "
WARN = "import air_mlgym, logging; air_mlgym.MLGymTaskset; logging.getLogger('air.sandbox.storage').warning('no quota')"


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=backstop(120))


def test_under_the_dashboard_the_warning_goes_to_the_log_file(tmp_path: Path) -> None:
    log = tmp_path / "eval.log"
    # What vf-eval 0.4.0 does under its dashboard (the default): loguru to the file only, no last resort.
    done = run_python(SETUP + "setup_logging('INFO', log_file=sys.argv[1], console=False)\n" + WARN, str(log))
    assert done.returncode == 0, done.stderr
    assert "No handlers could be found" not in done.stderr
    assert any(line.endswith("WARNING no quota") for line in log.read_text().splitlines()), log.read_text()


def test_with_no_rich_the_warning_is_a_console_line() -> None:
    done = run_python(SETUP + "setup_logging('INFO')\n" + WARN)
    assert any(line.endswith("WARNING no quota") for line in done.stderr.splitlines()), done.stderr


@pytest.mark.docker
def test_a_real_vf_eval_run_logs_the_quota_warning(docker_image: str, tmp_path: Path) -> None:
    if can_size(storage_driver(docker.from_env())):
        pytest.skip("this engine sizes containers: there is no warning to give")
    vf_eval = Path(sys.executable).parent / "vf-eval"
    extra = ["--env.taskset.task-configs", '["laneMerge"]', "--env.taskset.max-turns", "2"]
    extra += ["--env.taskset.image", docker_image, "--output-dir", str(tmp_path / "out")]
    env = {**os.environ, "OPENAI_API_KEY": "scripted", "AIR_CACHE_DIR": str(tmp_path / "first")}  # a first time
    with PolicyServer("baseline") as server:
        client = ["--client.base-url", server.base_url, "--client.api-key-var", "OPENAI_API_KEY"]
        command = [str(vf_eval), "air_mlgym", "-m", server.model_name, "-n", "1", "-r", "2", "--no-push"]
        command += [*client, *extra]
        done = subprocess.run(command, capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "No handlers could be found" not in done.stderr, done.stderr[:2000]
    (log,) = (tmp_path / "out").glob("*/logs/attempt_1/eval.log")
    (line,) = [line for line in log.read_text().splitlines() if "no disk quota" in line]
    assert "WARNING no disk quota for sandboxes on this Docker engine" in line and "said once per engine" in line
