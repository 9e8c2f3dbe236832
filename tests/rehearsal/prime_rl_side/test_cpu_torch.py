"""prime_rl_side/air_prime_rl/cpu_torch.py: a CUDA-only training step runs on the CPU once CUDA is redirected.

Each check runs in a fresh interpreter: the redirection patches torch for the life of its process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from rigs.patience import backstop
from tests.rehearsal.prime_rl_side import PRIME_RL_SIDE

torch = pytest.importorskip("torch", reason="torch is not installed in this venv")
pytestmark = pytest.mark.skipif(torch.cuda.is_available(), reason="a real GPU: the redirection is a no-op")

# A training step written for CUDA, as prime-rl's trainer writes it, measured by the trainer entries' probe.
STEP = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    import torch
    import torch.distributed as dist
    from air_prime_rl.cpu_torch import redirect_cuda_to_cpu
    from air_prime_rl.trainer_probe import Probe

    if sys.argv[1] == "redirect":
        assert redirect_cuda_to_cpu()
    torch.cuda.set_device(0)
    dist.init_process_group(backend="nccl", store=dist.HashStore(), rank=0, world_size=1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)).to("cuda")
    x = torch.randn(16, 8, device="cuda")
    y = torch.ones(16, 1).to(torch.device("cuda", 0), torch.float32)
    seed = torch.Generator(device="cuda").manual_seed(1)
    noise = torch.randn(16, 1, generator=seed).cuda()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    probe = Probe(Path(sys.argv[2]), "cpu").install()
    probe.note_batch(16, 16)
    torch.cuda.reset_peak_memory_stats()
    loss = ((model(x) - y - noise) ** 2).mean()
    loss.backward()
    optimizer.step()
    torch.cuda.synchronize()
    probe.note_metrics({"loss/mean": loss.item(), "optim/grad_norm": 1.0, "step": 0}, 0)
    probe.note_metrics({"time/step": 0.5, "step": 0}, 0)
    print(json.dumps({
        "devices": sorted({t.device.type for t in (x, y, noise, *model.parameters())}),
        "backend": dist.get_backend(),
        "peak_memory_bytes": torch.cuda.max_memory_allocated(),
    }))
    """
)


def run_step(tmp_path, mode: str) -> subprocess.CompletedProcess:
    path = os.pathsep.join(filter(None, [str(PRIME_RL_SIDE), os.environ.get("PYTHONPATH")]))
    return subprocess.run(
        [sys.executable, "-c", STEP, mode, str(tmp_path / "probe.jsonl")],
        capture_output=True,
        text=True,
        timeout=backstop(120),  # 2 s idle; torch's import alone took over 120 s at load 20-30
        cwd=tmp_path,  # air_prime_rl from PYTHONPATH, not from whatever the cwd holds
        env={**os.environ, "PYTHONPATH": path},
    )


def test_a_cuda_training_step_runs_on_the_cpu_and_the_probe_sees_it(tmp_path):
    result = run_step(tmp_path, "redirect")
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["devices"] == ["cpu"]  # device="cuda", .to("cuda"), .cuda() all landed on the CPU
    assert report["backend"] == "gloo"  # NCCL asked for, gloo given
    assert report["peak_memory_bytes"] > 0  # the process's peak RSS stands in for CUDA's figure
    (line,) = [json.loads(text) for text in (tmp_path / "probe.jsonl").read_text().splitlines()]
    assert line["max_param_change"] > 0
    assert line["trainable_tensors"] == line["changed_tensors"] == 4
    assert line["params_finite"] is True
    assert line["step_time_s"] == 0.5 and line["device"] == "cpu" and line["peak_memory_gib"] is None


def test_without_the_redirection_the_same_step_fails(tmp_path):
    """The control: the step above really needs CUDA, so the first test cannot pass by accident."""
    result = run_step(tmp_path, "plain")
    assert result.returncode != 0
    assert not (tmp_path / "probe.jsonl").exists()
