"""Opt-in: ``air rehearse`` against today's prime-rl (AIR_TEST_PRIME_RL_V1_DIR: a checkout installed by
``install_prime_rl.sh --orchestrator-only --commit 559b447``), with one env server the rehearsal starts and
one started separately, as on another node: prime-rl's own ``env_server`` entry point with its containers
on a second Docker engine (``scripts/second_docker_engine.sh``; needs root and dockerd, else it skips).
The rehearsal's server seats air_mlgym's in-process player, the separate one verifiers' ``null`` harness:
prime-rl's env server runs both.

Checked: the report's figures, rollouts from both servers, the second engine's containers (its event
log), and nothing left behind on either engine once the run and the separate server are stopped."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from air.cli.main import main
from air.launch.prime_rl import cpu_venv
from air.rehearsal.v1.plan import free_port_block
from air.sandbox.config import LABEL, LABEL_RUN
from rigs.patience import backstop
from tests.conftest import unavailable
from tests.opt_in import prime_rl_v1_checkout

ROOT = Path(__file__).resolve().parents[2]
# verifiers' `null` harness is a PEP 723 script that `uv run` resolves afresh, its openai unpinned: openai 3.63.0
# (2026-12-03) takes httpx2 and refuses the harness's httpx.Timeout, so every rollout of it errored. The
# separate server resolves it as of this date (openai 3.60.0), so PyPI's next release cannot change the test
# (a user of that harness at 559b447 meets the same: PROJECT_NOTES).
NULL_HARNESS_RESOLVED_AT = "2026-11-27T00:00:00Z"
SOURCE = """
[[orchestrator.train.source]]
name = "{name}"
[orchestrator.train.source.env.taskset]
id = "air_mlgym"
task_root = "builtin"
task_configs = ["{task}"]
max_turns = 4
image = "{image}"
run_id = "{run_id}"
[orchestrator.train.source.env.player.harness]
id = "air_mlgym"
[orchestrator.train.source.env.player.runtime]
type = "subprocess"
"""
CONFIG = """
max_steps = 50
seq_len = 4096
[deployment]
num_infer_gpus = 1
num_train_gpus = 1
[model]
name = "Qwen/Qwen3-4B-Instruct-2507"
[trainer]
[orchestrator]
batch_size = 4
group_size = 2
max_off_policy_steps = 1
[orchestrator.train.sampling]
max_completion_tokens = 256
[monitors.wandb]
project = "never-contacted"
"""
SERVER = """
[env.taskset]
id = "air_mlgym"
task_root = "builtin"
task_configs = ["laneMerge"]
max_turns = 4
image = "{image}"
run_id = "{run_id}"
[env.player.harness]
id = "null"
[env.player.runtime]
type = "subprocess"
[serve]
address = "tcp://127.0.0.1:{port}"
"""


@pytest.fixture
def checkout() -> Path:
    found = prime_rl_v1_checkout()
    if found is None:
        unavailable(
            "the rehearsal against 559b447",
            "no v1 prime-rl: set AIR_TEST_PRIME_RL_V1_DIR (install_prime_rl.sh --orchestrator-only --commit)",
        )
    return found


@pytest.fixture
def second_engine(tmp_path_factory, docker_image):
    if os.geteuid() != 0 or shutil.which("dockerd") is None:
        pytest.skip("a second Docker engine needs root and dockerd")
    folder = tmp_path_factory.mktemp("engine")
    script = str(ROOT / "scripts" / "second_docker_engine.sh")
    subprocess.run(["bash", script, "start", str(folder), docker_image], check=True, timeout=600)
    try:
        yield f"unix://{folder}/docker.sock"
    finally:
        subprocess.run(["bash", script, "stop", str(folder)], timeout=backstop(120))


def engine(host: str, *args: str) -> str:
    done = subprocess.run(["docker", *args], env={**os.environ, "DOCKER_HOST": host}, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.mark.timeout(1800)
def test_rehearse_v1_with_an_env_server_on_a_second_engine(
    checkout, second_engine, tmp_path, docker_image, tiny_model_dir, capsys
):
    run_id = f"v1e2e-{os.getpid()}"
    config = tmp_path / "rl.toml"
    sources = [SOURCE.format(name=n, task=t, image=docker_image, run_id=run_id) for n, t in (("lane", "laneMerge"),)]
    sources.append(SOURCE.format(name="loan", task="loanDefault", image=docker_image, run_id=run_id))
    config.write_text(CONFIG + "".join(sources))
    port = free_port_block(1)
    server_config = tmp_path / "lane_server.toml"
    server_config.write_text(SERVER.format(image=docker_image, run_id=run_id, port=port))
    started = time.time()
    first_engine = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    # Watched live: the shared engine keeps a short event history, which other suites' execs can flood.
    creates_on_first = subprocess.Popen(
        ["docker", "events", "--filter", "event=create", "--filter", "type=container"]
        + ["--filter", f"label={LABEL_RUN}=rehearse-{os.getpid()}"],
        env={**os.environ, "DOCKER_HOST": first_engine},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    log = (tmp_path / "env-server.log").open("wb")
    env = {**os.environ, "DOCKER_HOST": second_engine, "VLLM_API_KEY": "x", "HF_HUB_OFFLINE": "1"}
    # A cache of its own too: `uv sync --script` keeps an environment it finds that satisfies the script (an
    # openai 3.63 one made before, on a developer's machine), whatever the date says.
    env["UV_EXCLUDE_NEWER"], env["UV_CACHE_DIR"] = NULL_HARNESS_RESOLVED_AT, str(tmp_path / "uv-cache")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    python = cpu_venv(checkout) / "bin" / "python"
    server = subprocess.Popen(
        [str(python), "-m", "prime_rl.entrypoints.env_server", "@", str(server_config)],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        _wait_listening(port, server, tmp_path / "env-server.log")
        out = tmp_path / "rehearsal"
        argv = ["rehearse", "--config", str(config), "--steps", "2", "--prime-rl", str(checkout), "--output", str(out)]
        argv += ["--model", str(tiny_model_dir), "--external-env-server", f"lane=tcp://127.0.0.1:{port}", "--json"]
        status = main(argv)
        captured = capsys.readouterr()
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=backstop(60))
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
        creates_on_first.terminate()
        watched_on_first = creates_on_first.communicate(timeout=backstop(30))[0]
    assert captured.out.strip(), captured.err[-3000:]
    report = json.loads(captured.out.strip().splitlines()[-1])
    assert status == 0, report["problems"]
    assert report["generation"] == "v1" and report["steps_completed"] == 2
    assert report["masked"] == 0, _trace_errors(out)
    assert report["samples"] > 0 and report["advantage_nonzero_share"] > 0
    assert report["loss_mask_ok"] and report["advantages_match_rewards"]
    servers = {entry["source"]: entry for entry in report["env_servers"]}
    assert servers["lane"]["address"] == f"tcp://127.0.0.1:{port}"
    assert servers["lane"]["started_by"].startswith("separately") and servers["loan"]["started_by"] == "the rehearsal"
    assert servers["lane"]["rollouts"] > 0 and servers["loan"]["rollouts"] > 0
    assert "train/agg/all/player/metrics/format_errors/mean" in report["env_metrics"]
    assert report["dispatched"] >= report["rollouts"] - servers["lane"]["rollouts"] and "cancelled_share" in report
    harnesses: dict[str, set[str]] = {}
    for path in (out / "run" / "rollouts").glob("step_*/train/all/traces.jsonl"):
        for line in path.read_text().splitlines():
            episode = json.loads(line)
            for trace in episode["traces"]:
                harness = trace["agent"]["config"]["harness"]["id"]
                harnesses.setdefault(episode["env"]["name"], set()).add(harness)
    assert harnesses == {"loan": {"air_mlgym"}, "lane": {"null"}}, harnesses

    since, until = str(int(started) - 1), str(int(time.time()) + 1)
    creates = ["events", "--since", since, "--until", until, "--filter", "event=create", "--filter", "type=container"]
    on_second = engine(second_engine, *creates, "--filter", f"label={LABEL_RUN}={run_id}")
    assert on_second.count("container create") >= 1  # the separate server's containers ran on the second engine
    # The rehearsal's own server used the first engine; both are empty of this run's containers now.
    assert watched_on_first.count("container create") >= 1, watched_on_first
    assert engine(second_engine, "ps", "-aq", "--filter", f"label={LABEL}").strip() == ""
    for label in (run_id, f"rehearse-{os.getpid()}"):
        assert engine(first_engine, "ps", "-aq", "--filter", f"label={LABEL_RUN}={label}").strip() == ""


def _trace_errors(out: Path) -> list[str]:
    """The errors of the traces that did not end ok (what a masked count alone hides), the last 600 characters of
    the first few."""
    errors = []
    for path in sorted((out / "run" / "rollouts").glob("step_*/train/all/traces.jsonl")):
        for line in path.read_text().splitlines():
            episode = json.loads(line)
            errors += [f"{episode['env']['name']}: {str(e.get('message', e))[-600:]}" for t in episode["traces"]
                       for e in t.get("errors") or []]  # fmt: skip
    return errors[:4]


def _wait_listening(port: int, server: subprocess.Popen, log: Path, timeout: float = backstop(300)) -> None:
    import socket

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            pytest.fail(f"the env server exited ({server.returncode}):\n{log.read_text()[-3000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(1)
    pytest.fail(f"the env server did not listen on {port}:\n{log.read_text()[-3000:]}")
