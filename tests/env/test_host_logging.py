"""Our warnings inside the classic vf-eval (verifiers 0.1.x): they go where it sends verifiers' own
records (its env server's eval.log; the console with --debug), and where nothing is configured they are
one line of their own, not glued to tqdm's bar. Each case runs in a fresh interpreter: logging is global."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import docker
import pytest

from air.sandbox.storage import can_size, storage_driver
from air.serving.server import PolicyServer
from rigs.patience import backstop

WARN = "import logging; logging.getLogger('air.sandbox.storage').warning('no disk quota, said here')\n"


def run_python(code: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=backstop(120))


def test_under_the_classic_vf_eval_a_warning_goes_to_its_log_file(tmp_path: Path) -> None:
    log = tmp_path / "eval.log"
    # What its env server does without --debug: verifiers' console at CRITICAL, the file at INFO.
    setup = "import sys, verifiers; verifiers.setup_logging('CRITICAL', log_file=sys.argv[1], log_file_level='INFO')\n"
    done = run_python(setup + "import air.env.mlgym_env\n" + WARN, str(log))
    assert done.returncode == 0, done.stderr
    assert "air.sandbox.storage - WARNING - no disk quota, said here" in log.read_text()
    assert "no disk quota" not in done.stderr  # its console is off: the program's choice


def test_with_debug_the_warning_is_a_console_line_in_verifiers_format() -> None:
    setup = "import verifiers; verifiers.setup_logging('INFO')\n"
    done = run_python(setup + "import air.env.mlgym_env\n" + WARN)
    (line,) = [line for line in done.stderr.splitlines() if "no disk quota" in line]
    assert line.endswith(" - air.sandbox.storage - WARNING - no disk quota, said here"), done.stderr


def test_where_nothing_is_configured_the_warning_is_its_own_line_beside_a_progress_bar() -> None:
    code = (
        "import sys, tqdm, air.env.mlgym_env\n"
        "bar = tqdm.tqdm(total=3, file=sys.stderr, desc='Processing')\n"
        "bar.update(1)\n" + WARN + "bar.update(2); bar.close()\n"
    )
    done = run_python(code)
    pieces = [piece.strip() for line in done.stderr.splitlines() for piece in line.split("\r")]
    assert "warning: no disk quota, said here" in pieces, repr(done.stderr)


# A masked rollout's line (air.env.core) quotes the container: colours, an OSC 8 link, C0/C1 controls, bidi.
HOSTILE_MASKED = (
    "import logging\n"
    "try:\n"
    "    raise RuntimeError('out: \\x1b[31mred\\x1b]8;;http://evil.example\\x07click\\x1b]8;;\\x07'\n"
    "                       ' \\x07\\x9b2J \\u202eevil')\n"
    "except RuntimeError as exc:\n"
    "    logging.getLogger('air.env.core').warning('rollout of %s masked: %s', 'dial', exc, exc_info=exc)\n"
)


@pytest.mark.parametrize("where", ["eval_log", "own_line"])
def test_a_masked_rollouts_line_reaches_the_hosts_log_inert(where: str, tmp_path: Path) -> None:
    """The host's formatter is not ours: the record it gets is already neutral, message and traceback."""
    log = tmp_path / "eval.log"
    setup = "import sys, verifiers; verifiers.setup_logging('CRITICAL', log_file=sys.argv[1], log_file_level='INFO')\n"
    done = run_python((setup if where == "eval_log" else "") + "import air.env.mlgym_env\n" + HOSTILE_MASKED, str(log))
    assert done.returncode == 0, done.stderr
    text = log.read_text() if where == "eval_log" else done.stderr
    assert "rollout of dial masked: out: redclick <U+0007> <U+202E>evil" in text, text
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", text) and "evil.example" not in text, text
    if where == "eval_log":
        assert "RuntimeError: out: redclick" in text  # the traceback, neutral too


@pytest.mark.parametrize(
    "setup", ["from air.env.v1_serve import _log_setup as setup", "from air.cli.fleet import _logging as setup"]
)
def test_an_env_server_or_fleet_nodes_own_log_lines_are_inert(setup: str) -> None:
    """The processes that set up logging themselves (a v1 env server, an env node) write neutral lines."""
    done = run_python(f"{setup}\nsetup()\n" + HOSTILE_MASKED)
    assert done.returncode == 0, done.stderr
    assert "rollout of dial masked: out: redclick <U+0007> <U+202E>evil" in done.stderr, done.stderr
    assert "RuntimeError: out: redclick" in done.stderr
    assert not re.search("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e]", done.stderr), done.stderr


@pytest.mark.docker
def test_a_real_classic_vf_eval_run_logs_the_quota_warning_in_its_eval_log(docker_image: str, tmp_path: Path) -> None:
    if can_size(storage_driver(docker.from_env())):
        pytest.skip("this engine sizes containers: there is no warning to give")
    args = {"task_configs": ["laneMerge"], "max_turns": 2, "image": docker_image}
    with PolicyServer("baseline") as server:
        argv = ["air_mlgym", "-b", server.base_url, "-m", server.model_name, "-k", "OPENAI_API_KEY"]
        argv += ["-n", "1", "-r", "2", "-a", json.dumps(args)]
        vf_eval = Path(sys.executable).parent / "vf-eval"
        env = {**os.environ, "OPENAI_API_KEY": "scripted", "AIR_CACHE_DIR": str(tmp_path / "first")}  # a first time
        done = subprocess.run([str(vf_eval), *argv], capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    (log,) = tmp_path.glob("outputs/evals/*/*/eval.log")
    (line,) = [line for line in log.read_text().splitlines() if "no disk quota" in line]
    assert " - air.sandbox.storage - WARNING - no disk quota for sandboxes on this Docker engine" in line
    assert "said once per engine" in line and "no disk quota" not in done.stderr
