"""The warm-up before RL: the reply format taught by supervised fine-tuning on trajectories of the real env.

    uv run --extra tiny python benchmarks/learning_warmup.py --out DIR [--rollouts 64] [--epochs 3] [--seed 0]

1. ``air standalone --policy probe`` plays ``--rollouts`` rollouts of ridgePenalty in containers (the real
   env, its real reward): each sets a penalty drawn evenly over the decades 0.01..10,000 and validates. The
   probe knows the format and never the answer: what the warm-up teaches is how to reply.
2. Every well-formed reply becomes one example: the env's own system and task prompt, the reply as the
   assistant's message, rendered by the model's own chat template (what prime-rl's ``default`` renderer
   sends vLLM), loss on the reply's tokens only.
3. AdamW over the examples, ``--epochs`` passes, float32 on the CPU; the model is written to DIR/model
   (a transformers folder), the data to DIR/sft.jsonl and the losses to DIR/warmup.json.

Why not prime-rl's ``sft``: 559b447's SFT refuses a model without a typed renderer, and none is registered
for SmolLM2's ChatML template (its ``default`` renderer is refused by name). The RL that follows is prime-rl's
own, learn and control alike starting from DIR/model.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from air.serving.models.smollm2 import prepare_smollm2  # noqa: E402

TASK = "ridgePenalty"


def play_probe(out: Path, rollouts: int, seed: int) -> list[dict]:
    """The probe's rollouts in the real env; returns one SFT example per well-formed reply."""
    run = out / "probe"
    command = [
        sys.executable, "-m", "air.cli.main", "standalone", "--policy", "probe", "--task", TASK,
        "--max-turns", "1", "--steps", str(max(1, rollouts // 8)), "--batch-size", "8",
        "--rollouts-per-example", "8", "--seed", str(seed), "--env-arg", 'prompt_style="brief"',
        "--output-dir", str(run), "--overwrite",
    ]  # fmt: skip
    subprocess.run(command, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
    examples = []
    for path in sorted((run / "trajectories").rglob("*.json")):
        record = json.loads(path.read_text())
        turn = (record.get("turns") or [{}])[0]
        if turn.get("command") and not turn.get("format_error"):
            prompt = [
                {"role": "system", "content": record["system_prompt"]},
                {"role": "user", "content": record["task_prompt"]},
            ]
            examples.append({"prompt": prompt, "completion": [{"role": "assistant", "content": turn["model_text"]}],
                             "reward": record.get("reward")})  # fmt: skip
    return examples


def fine_tune(base: Path, examples: list[dict], out: Path, epochs: int, lr: float, seed: int) -> list[float]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(seed)
    tokenizer = AutoTokenizer.from_pretrained(base)
    model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    model.train()
    encoded = []
    for example in examples:
        prompt = tokenizer.apply_chat_template(example["prompt"], add_generation_prompt=True, tokenize=False)
        full = tokenizer.apply_chat_template(example["prompt"] + example["completion"], tokenize=False)
        assert full.startswith(prompt), "the chat template does not extend the prompt"
        prompt_ids = tokenizer(prompt, add_special_tokens=False)["input_ids"]
        ids = prompt_ids + tokenizer(full[len(prompt) :], add_special_tokens=False)["input_ids"]
        encoded.append((torch.tensor([ids]), torch.tensor([[-100] * len(prompt_ids) + ids[len(prompt_ids) :]])))
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    rng, losses = random.Random(seed), []
    for _epoch in range(epochs):
        order = list(range(len(encoded)))
        rng.shuffle(order)
        for start in range(0, len(order), 8):  # batches of 8 examples, one optimizer step each
            optimizer.zero_grad()
            batch = [encoded[i] for i in order[start : start + 8]]
            total = 0.0
            for ids, labels in batch:
                loss = model(input_ids=ids, labels=labels).loss / len(batch)
                loss.backward()
                total += float(loss)
            optimizer.step()
            losses.append(round(total, 4))
            print(f"warm-up step {len(losses)}: loss {total:.4f}", flush=True)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    return losses


def warm_up(out: Path, rollouts: int = 64, epochs: int = 3, lr: float = 5e-5, seed: int = 0) -> Path:
    """DIR/model after the warm-up (made once: an existing DIR/model is kept)."""
    model_dir = out / "model"
    if (model_dir / "config.json").exists():
        return model_dir
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    examples = play_probe(out, rollouts, seed)
    with open(out / "sft.jsonl", "w") as data:
        for example in examples:
            data.write(json.dumps(example) + "\n")
    base = prepare_smollm2().path
    losses = fine_tune(Path(base), examples, model_dir, epochs, lr, seed)
    summary = {"examples": len(examples), "epochs": epochs, "lr": lr, "seed": seed, "losses": losses,
               "probe_reward_mean": sum(e["reward"] for e in examples) / max(1, len(examples)),
               "seconds": round(time.perf_counter() - started, 1)}  # fmt: skip
    (out / "warmup.json").write_text(json.dumps(summary, indent=1))
    return model_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    parser.add_argument("--rollouts", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=5e-5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    print(warm_up(Path(args.out).resolve(), args.rollouts, args.epochs, args.lr, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
