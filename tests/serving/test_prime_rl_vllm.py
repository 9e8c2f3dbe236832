"""prime-rl's own inference server as the rehearsal's engine (air.serving.prime_rl_vllm): the config it is
started from at each pin, how a venv with vLLM is told from one with the import-only stand-in, the weight
routes read back from its log, and, against the --cpu install of today's pin (AIR_TEST_PRIME_RL_V1_CPU_DIR;
CI installs it; skipped without, failed in CI), the server itself: it serves SmolLM2, loads a LoRA adapter by
prime-rl's route (the record says so, with the folder), refuses a folder that is not one (the record says
why), scores a sample differently under the adapter, and leaves no process behind.
"""

from __future__ import annotations

import json
import os
import tomllib
from pathlib import Path

import httpx
import psutil
import pytest

from air.launch.prime_rl import cpu_venv
from air.rehearsal.trainer_report import served_sample
from air.serving.prime_rl_vllm import PrimeRlVllm, has_vllm, inference_config, weight_updates_in
from tests.conftest import PRIME_RL_RUNS, unavailable
from tests.opt_in import prime_rl_cpu_checkout

MODEL = Path("/models/smollm2")


def test_the_classic_pin_reads_toml_with_its_model_section():
    name, text = inference_config("classic", MODEL, 8123, max_model_len=2048, seed=3, lora_rank=16)
    config = tomllib.loads(text)
    assert name == "inference.toml"
    assert config["server"] == {"port": 8123} and config["seed"] == 3
    assert config["model"] == {"name": str(MODEL), "dtype": "float32", "enforce_eager": True, "max_model_len": 2048}
    assert config["enable_lora"] is True and config["max_lora_rank"] == 16


def test_todays_pin_reads_json_with_no_router_and_lora_only_when_asked():
    name, text = inference_config("v1", MODEL, 8124, max_model_len=None, seed=0, lora_rank=None)
    config = json.loads(text)
    assert name == "inference.json" and config["router"] is None and config["server"] == {"port": 8124}
    assert config["enable_fp32_lm_head"] is False  # torch.mm(out_dtype=) exists only on CUDA
    assert config["vllm"] == {"model": str(MODEL), "dtype": "float32", "enforce_eager": True, "seed": 0}


def venv_with(tmp_path: Path, *files: str) -> Path:
    for relative in files:
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    return tmp_path / "bin" / "python"


def test_vllm_is_found_only_where_it_is_real_and_prime_rl_serves_it(tmp_path):
    real = "lib/python3.12/site-packages/vllm/entrypoints/openai/api_server.py"
    assert has_vllm(venv_with(tmp_path / "cpu", "bin/python", "bin/inference", real))
    # The orchestrator-only install's stand-in is a package named vllm with nothing to serve.
    assert not has_vllm(venv_with(tmp_path / "stand-in", "bin/python", "bin/inference", "lib/python3.12/vllm/x.py"))
    assert not has_vllm(venv_with(tmp_path / "no-entry", "bin/python", real))


LOG = """\
(APIServer pid=7) INFO:     127.0.0.1:5 - "POST /pause?mode=keep HTTP/1.1" 200 OK
(APIServer pid=7) INFO [serving.py:216] Loaded new LoRA adapter: name 'step_1', path '/run/step_1'
(APIServer pid=7) INFO:     127.0.0.1:5 - "POST /load_lora_adapter HTTP/1.1" 200 OK
(APIServer pid=7) INFO:     127.0.0.1:5 - "POST /v1/chat/completions HTTP/1.1" 200 OK
(APIServer pid=7) INFO:     127.0.0.1:5 - "POST /update_weights HTTP/1.1" 500 Internal Server Error
(APIServer pid=7) Traceback (most recent call last):
(APIServer pid=7) ValueError: a first reason
(APIServer pid=7) Exception: Call to collective_rpc method failed: no module named 'embed_tokens.weight'
(APIServer pid=7) INFO:     127.0.0.1:5 - "POST /update_weights HTTP/1.1" 200 OK
"""


def test_the_weight_routes_are_read_back_from_the_log(tmp_path):
    log = tmp_path / "vllm.log"
    log.write_text(LOG)
    adapter, failed, full = weight_updates_in(log)
    assert (adapter.route, adapter.loaded, adapter.body) == (
        "/load_lora_adapter",
        True,
        {"lora_path": "/run/step_1"},
    )
    assert failed.loaded is False
    assert (
        failed.error
        == "/update_weights answered 500: Call to collective_rpc method failed: no module named 'embed_tokens.weight'"
    )
    assert (full.route, full.loaded, full.body, full.error) == ("/update_weights", True, {}, None)
    assert weight_updates_in(tmp_path / "missing.log") == []


def lora_adapter(model: Path, folder: Path, rank: int) -> Path:
    """A PEFT adapter on the model's q and v projections with small random weights (what prime-rl's
    trainer broadcasts for a LoRA run: adapter_config.json and adapter_model.safetensors)."""
    import torch
    from safetensors.torch import save_file

    config = json.loads((model / "config.json").read_text())
    hidden, heads = config["hidden_size"], config["num_attention_heads"]
    kv = config["num_key_value_heads"] * hidden // heads
    generator = torch.Generator().manual_seed(0)
    tensors = {}
    for layer in range(config["num_hidden_layers"]):
        for module, width in (("q_proj", hidden), ("v_proj", kv)):
            prefix = f"base_model.model.model.layers.{layer}.self_attn.{module}"
            tensors[f"{prefix}.lora_A.weight"] = torch.randn(rank, hidden, generator=generator) * 0.05
            tensors[f"{prefix}.lora_B.weight"] = torch.randn(width, rank, generator=generator) * 0.05
    folder.mkdir(parents=True)
    save_file(tensors, str(folder / "adapter_model.safetensors"))
    peft = {"peft_type": "LORA", "r": rank, "lora_alpha": 2 * rank, "target_modules": ["q_proj", "v_proj"]}
    (folder / "adapter_config.json").write_text(json.dumps({**peft, "bias": "none", "task_type": "CAUSAL_LM"}))
    return folder


def session_processes(session: int) -> list[str]:
    left = []
    for process in psutil.process_iter(["pid", "name", "status"]):
        try:
            if os.getsid(process.pid) == session and process.info["status"] != psutil.STATUS_ZOMBIE:
                left.append(f"{process.pid} {process.info['name']}")
        except (ProcessLookupError, PermissionError):
            continue
    return left


@pytest.mark.xdist_group(PRIME_RL_RUNS)
@pytest.mark.timeout(1200)
def test_prime_rl_serves_smollm2_and_loads_an_adapter_by_its_route(tmp_path, smollm2):
    checkout = prime_rl_cpu_checkout("v1")
    python = cpu_venv(checkout) / "bin" / "python" if checkout else None
    if python is None or not has_vllm(python):
        unavailable("prime-rl's vLLM", "no --cpu install of 559b447: AIR_TEST_PRIME_RL_V1_CPU_DIR")
    model = Path(smollm2.path)
    adapter = lora_adapter(model, tmp_path / "adapter", rank=8)
    with PrimeRlVllm(python, "v1", model, tmp_path / "vllm", max_model_len=512, lora_rank=8) as server:
        session = server.session
        root = server.base_url.removesuffix("/v1")
        loaded = httpx.post(
            f"{root}/load_lora_adapter", json={"lora_name": "a", "lora_path": str(adapter)}, timeout=600
        )
        assert loaded.status_code == 200, loaded.text
        refused = httpx.post(
            f"{root}/load_lora_adapter", json={"lora_name": "b", "lora_path": str(tmp_path)}, timeout=600
        )
        assert refused.status_code >= 400
        token_ids = httpx.post(
            f"{root}/tokenize", json={"model": server.model_name, "prompt": "ls -la\nvalidate"}, timeout=60
        ).json()["tokens"]
        scored = served_sample(server.base_url, server.model_name, "a", token_ids, [True] * len(token_ids), vllm=True)
    assert scored.logprob_before < 0 and scored.logprob_after < 0
    assert abs(scored.logprob_after - scored.logprob_before) > 1e-3, scored
    good, bad = server.weight_updates
    assert (good.loaded, good.body) == (True, {"lora_path": str(adapter)})
    assert bad.loaded is False and bad.error and "answered" in bad.error
    assert session_processes(session) == []
