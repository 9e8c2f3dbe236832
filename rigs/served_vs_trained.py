"""Is the policy that samples the policy that trains? After prime-rl's route loads a broadcast into its vLLM
server, fixed texts' per-token logprobs through the server against the same broadcast run in transformers, in
the sampler's dtype (prime_rl_side/air_prime_rl/score_texts.py, in prime-rl's venv).

Shared by tests/rehearsal/test_rl_cpu_e2e.py (both pins, the real trainer's last broadcast) and
benchmarks/learning.py (the mismatch per step of a run).

TOLERANCE, per token, in nats: the same float32 weights through vLLM's CPU kernels and through transformers'
differ by what summation order does to float32 logits (measured up to ~2e-5 on SmolLM2: experiments.md).
What the check must catch is ten to a thousand times larger: one training step at lr 1e-5 moves a token's
logprob by 1e-3 to 1e-2, rounding the weights to bfloat16 by ~1e-2, an LM head left at the base values while
the tied embedding moved by as much as the step moved it. 1e-3 sits between: 50x the kernels' noise, below
one step's effect.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

from rigs.prime_rl_inference import served_token_logprobs, split_ids

TOLERANCE = 1e-3
# Fixed texts: a chat prompt in SmolLM2's template and a reply, as the env's turns look.
FIXED_TEXTS = (
    (
        "<|im_start|>user\nWhich command validates the submission?<|im_end|>\n<|im_start|>assistant\n",
        "I will score it.\n```bash\nvalidate\n```<|im_end|>",
    ),
    (
        "<|im_start|>system\nReply with one command in a bash block.<|im_end|>\n<|im_start|>user\n"
        "Set the penalty to 10.<|im_end|>\n<|im_start|>assistant\n",
        "Let me try a penalty of 10 and score it.\n```bash\necho 10 > submission.csv && validate\n```<|im_end|>",
    ),
)


def samples(base: str) -> list[dict[str, list[int]]]:
    found = []
    for prompt, completion in FIXED_TEXTS:
        prompt_ids, completion_ids = split_ids(base, prompt, completion)
        found.append({"prompt_ids": prompt_ids, "completion_ids": completion_ids})
    return found


def trained_token_logprobs(
    venv: Path, model_dir: Path, weights_dir: Path | None, texts: list[dict], dtype: str = "float32"
) -> dict:
    """score_texts in prime-rl's venv: the broadcast's weights in transformers."""
    request = {"model_dir": str(model_dir), "weights_dir": str(weights_dir) if weights_dir else None,
               "dtype": dtype, "samples": texts}  # fmt: skip
    with tempfile.NamedTemporaryFile("w", suffix=".json") as file:
        json.dump(request, file)
        file.flush()
        done = subprocess.run(
            [str(venv / "bin" / "python"), "-m", "air_prime_rl.score_texts", file.name],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"score_texts exited {done.returncode}: {done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def compare(base: str, venv: Path, model_dir: Path, weights_dir: Path | None, dtype: str = "float32") -> dict:
    """The served weights (whatever the server holds now) against ``weights_dir`` run in transformers."""
    texts = samples(base)
    served = [served_token_logprobs(base, t["prompt_ids"], t["completion_ids"]) for t in texts]
    trained = trained_token_logprobs(venv, model_dir, weights_dir, texts, dtype)
    pairs = zip(served, trained["logprobs"], strict=True)
    differences = [abs(a - b) for s, t in pairs for a, b in zip(s, t, strict=True)]
    return {
        "max_abs_diff": max(differences),
        "mean_abs_diff": sum(differences) / len(differences),
        "tokens": len(differences),
        "served_sums": [sum(s) for s in served],
        "trained_sums": [sum(t) for t in trained["logprobs"]],
        "weights_dtypes": trained["weights_dtypes"],
        "missing": trained["missing"],
        "unexpected": trained["unexpected"],
        "tied": trained["tied"],
        "within_tolerance": max(differences) <= TOLERANCE,
    }


def write_decoy(venv: Path, broadcast: Path, target: Path, factor: float = 0.9) -> Path:
    """A copy of ``broadcast`` with every floating-point tensor scaled by ``factor`` (air_prime_rl.scaled_weights,
    in prime-rl's venv): loaded first, it makes a load of the real broadcast that skips a tensor visible."""
    done = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "air_prime_rl.scaled_weights", str(broadcast), str(target), str(factor)],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"scaled_weights exited {done.returncode}: {done.stderr[-2000:]}")
    return target
