"""The scripted server loads a trainer's broadcasts (``air rehearse --trainer``), as vLLM does.

A LoRA adapter in PEFT's layout and full weights in HF safetensors, posted to the routes prime-rl's
orchestrator calls after each update; the logprobs that come back must be the updated model's, computed
here independently (LoRA through forward hooks, not the server's merge). A broadcast that does not fit is
a 500 with its reason, recorded, and the served model stays as it was.
"""

from __future__ import annotations

import math
from pathlib import Path

import httpx
import pytest

from air.serving.server import PolicyServer
from rigs.patience import backstop
from tests.lora_files import ALPHA, RANK, write_adapter

REPLY = "ls data\n```bash\nhead -3 data/train.csv\n```"
PROMPT = [{"role": "user", "content": "Beat the baseline on data/train.csv."}]


class Says:
    name = "says"

    def respond(self, messages, rng) -> str:
        return REPLY


@pytest.fixture
def server(tiny_model_dir: Path):
    with PolicyServer(Says(), vllm_model=tiny_model_dir, max_model_len=512, load_broadcasts=True) as running:
        yield running


@pytest.fixture(scope="module")
def base(tiny_model_dir: Path):
    import torch
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32).eval()


def chat(server: PolicyServer, model: str) -> tuple[list[int], list[int], list[float]]:
    body = {"model": model, "messages": PROMPT, "logprobs": True, "return_token_ids": True}
    answer = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=backstop(30)).json()
    choice = answer["choices"][0]
    return (
        answer["prompt_token_ids"],
        choice["token_ids"],
        [entry["logprob"] for entry in choice["logprobs"]["content"]],
    )


def independent_logprobs(model, prompt_ids: list[int], completion_ids: list[int]) -> list[float]:
    import torch

    ids = torch.tensor([prompt_ids + completion_ids])
    with torch.inference_mode():
        logits = model(input_ids=ids).logits[0]
    predicting = logits[len(prompt_ids) - 1 : len(prompt_ids) - 1 + len(completion_ids)]
    return torch.log_softmax(predicting, -1).gather(1, torch.tensor(completion_ids)[:, None])[:, 0].tolist()


def lora_hooks(model, tensors: dict) -> list:
    """The adapter as PEFT applies it at run time: y += scale * x @ A^T @ B^T (no merged weight)."""
    modules = dict(model.named_modules())
    handles = []
    for key, a in tensors.items():
        if not key.endswith("lora_A.weight"):
            continue
        name = key.removeprefix("base_model.model.").removesuffix(".lora_A.weight")
        b = tensors[key.replace("lora_A", "lora_B")]

        def hook(module, inputs, output, a=a, b=b):
            return output + (ALPHA / RANK) * (inputs[0] @ a.T @ b.T)

        handles.append(modules[name].register_forward_hook(hook))
    return handles


def post(server: PolicyServer, route: str, body: dict) -> httpx.Response:
    return httpx.post(server.base_url.removesuffix("/v1") + route, json=body, timeout=backstop(30))


def test_a_loaded_lora_adapter_serves_the_updated_models_logprobs(server, base, tmp_path):
    tensors = write_adapter(tmp_path / "step_1", base)
    prompt, completion, before = chat(server, server.model_name)
    assert post(server, "/load_lora_adapter", {"lora_name": "r-0", "lora_path": str(tmp_path / "step_1")}).json() == {
        "status": "ok"
    }
    prompt_after, completion_after, adapted = chat(server, "r-0")
    assert (prompt_after, completion_after) == (prompt, completion)  # the text is scripted; only logprobs move
    handles = lora_hooks(base, tensors)
    try:
        expected = independent_logprobs(base, prompt, completion)
    finally:
        for handle in handles:
            handle.remove()
    assert adapted == pytest.approx(expected, abs=2e-4)
    assert max(abs(x - y) for x, y in zip(adapted, before, strict=True)) > 1e-3
    assert chat(server, server.model_name)[2] == pytest.approx(before, abs=1e-6)  # the base is served unchanged
    update = server.weight_updates[-1]
    assert (update.route, update.loaded, update.error) == ("/load_lora_adapter", True, None)


def test_full_weights_replace_the_served_model(server, base, tmp_path):
    import torch
    from safetensors.torch import save_file

    prompt, completion, before = chat(server, server.model_name)
    changed = {key: value.clone() for key, value in base.state_dict().items()}
    changed["lm_head.weight"] += 0.5
    changed["model.layers.0.mlp.down_proj.weight"] *= 3.0
    (tmp_path / "step_2").mkdir()
    save_file({k: v.contiguous() for k, v in changed.items()}, str(tmp_path / "step_2" / "model.safetensors"))
    assert post(server, "/update_weights", {"weight_dir": str(tmp_path / "step_2")}).status_code == 200
    import copy

    reference = copy.deepcopy(base)
    reference.load_state_dict(changed)
    after = chat(server, server.model_name)[2]
    assert after == pytest.approx(independent_logprobs(reference, prompt, completion), abs=2e-4)
    assert not torch.allclose(torch.tensor(after), torch.tensor(before), atol=1e-3)


@pytest.mark.parametrize(
    "fault, reason",
    [
        ("missing", "no adapter_config.json"),
        ("stranger", "is no layer of the model"),
        ("nan", "holds NaN or inf"),
        ("shape", "makes an update of shape"),
        ("half", "without its pair"),
    ],
)
def test_an_adapter_that_does_not_fit_is_refused_with_its_reason(server, base, tmp_path, fault, reason):
    import torch

    folder = tmp_path / "bad"
    key = "base_model.model.model.layers.0.self_attn.q_proj.lora_A.weight"
    if fault == "missing":
        folder.mkdir()
    elif fault == "stranger":
        write_adapter(
            folder, base, extra={"base_model.model.model.layers.9.attn.x.lora_A.weight": torch.ones(RANK, 64)}
        )
    elif fault == "nan":
        write_adapter(folder, base, extra={key: torch.full((RANK, 64), math.nan)})
    elif fault == "shape":
        write_adapter(folder, base, extra={key: torch.ones(RANK, 7)})
    else:
        norm = "base_model.model.model.layers.0.input_layernorm.lora_B.weight"  # a layer, but half a pair
        write_adapter(folder, base, extra={norm: torch.ones(64, RANK)})
    _, _, before = chat(server, server.model_name)
    answer = post(server, "/load_lora_adapter", {"lora_name": "r-0", "lora_path": str(folder)})
    assert answer.status_code == 500 and reason in answer.text
    update = server.weight_updates[-1]
    assert update.loaded is False and reason in update.error
    assert "r-0" not in server.app.vllm.model_ids()  # nothing half-loaded is served
    assert chat(server, server.model_name)[2] == pytest.approx(before, abs=1e-6)


def test_full_weights_that_do_not_match_the_model_are_refused(server, tmp_path):
    import torch
    from safetensors.torch import save_file

    (tmp_path / "w").mkdir()
    save_file({"lm_head.weight": torch.zeros(2048, 64)}, str(tmp_path / "w" / "model.safetensors"))
    answer = post(server, "/update_weights", {"weight_dir": str(tmp_path / "w")})
    assert answer.status_code == 500 and "do not match the model" in answer.text
    assert post(server, "/update_weights", {"weight_dir": str(tmp_path / "empty")}).status_code == 500
    assert [u.loaded for u in server.weight_updates[-2:]] == [False, False]


def test_without_load_broadcasts_the_routes_only_acknowledge(tiny_model_dir, tmp_path):
    with PolicyServer(Says(), vllm_model=tiny_model_dir, max_model_len=512) as plain:
        answer = post(plain, "/load_lora_adapter", {"lora_name": "r-0", "lora_path": str(tmp_path / "absent")})
        assert answer.status_code == 200 and plain.weight_updates[-1].loaded is None
