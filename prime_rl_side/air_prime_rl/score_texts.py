"""The trainer's side of "the policy that samples is the policy that trains": per-token logprobs of fixed token
sequences under a weight folder prime-rl's trainer broadcast, run in transformers (prime-rl's venv has it).

    python -m air_prime_rl.score_texts REQUEST.json   # prints one JSON object

REQUEST: {"model_dir": the base model's folder (its config and architecture), "weights_dir": the broadcast
folder (safetensors, any shards; null: the base weights), "dtype": "float32"|"bfloat16" (the sampler's),
"samples": [{"prompt_ids": [...], "completion_ids": [...]}]}. Answer: {"logprobs": [[per completion token]],
"weights_dtypes": the broadcast's tensor dtypes, "missing": keys the broadcast lacks, "unexpected": keys the
model lacks, "tied": whether the model's LM head is its embedding}. A tied head follows the broadcast's
embedding here, as it does in the trainer (one tensor): a sampler whose head kept the base values differs.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def broadcast_state(weights_dir: Path) -> dict[str, torch.Tensor]:
    files = sorted(weights_dir.glob("*.safetensors"))
    if not files:
        raise SystemExit(f"{weights_dir}: no .safetensors file")
    state: dict[str, torch.Tensor] = {}
    for file in files:
        state.update(load_file(str(file)))
    return state


def score(request: dict) -> dict:
    dtype = DTYPES[request.get("dtype", "float32")]
    model = AutoModelForCausalLM.from_pretrained(request["model_dir"], dtype=dtype)
    answer: dict = {"weights_dtypes": [], "missing": [], "unexpected": []}
    if request.get("weights_dir"):
        state = broadcast_state(Path(request["weights_dir"]))
        answer["weights_dtypes"] = sorted({str(t.dtype).removeprefix("torch.") for t in state.values()})
        result = model.load_state_dict({k: v.to(dtype) for k, v in state.items()}, strict=False)
        answer["missing"], answer["unexpected"] = list(result.missing_keys), list(result.unexpected_keys)
    if model.config.tie_word_embeddings:
        model.tie_weights()  # the head is the embedding, as in the trainer
    answer["tied"] = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    model.eval()
    logprobs = []
    with torch.no_grad():
        for sample in request["samples"]:
            prompt, completion = sample["prompt_ids"], sample["completion_ids"]
            ids = torch.tensor([prompt + completion])
            logits = model(input_ids=ids).logits[0].float()
            scored = torch.log_softmax(logits[len(prompt) - 1 : -1], dim=-1)
            logprobs.append(scored.gather(1, torch.tensor(completion)[:, None])[:, 0].tolist())
    answer["logprobs"] = logprobs
    return answer


if __name__ == "__main__":
    print(json.dumps(score(json.loads(Path(sys.argv[1]).read_text()))))
