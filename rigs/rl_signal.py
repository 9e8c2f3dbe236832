"""The RL signal guard's harness: one step of prime-rl's own trainer on a fixed batch of two completions of one
prompt, with advantages +A and -A, and the completions' logprobs before and after it.

The batch is written by prime-rl's own code in its own format (``air_prime_rl.rl_signal`` in its venv); the
trainer is its real entry, started as ``air rehearse --trainer`` starts it (``torch.distributed.run``, one
process, CUDA calls to the CPU where there is no GPU), with prime-rl's default loss and optimizer (AdamW, grad
clipping, weight decay) at our configs' learning rate; its update comes back as the filesystem broadcast
``broadcasts/step_1/`` (float32 on a CPU: air_prime_rl.served_weights; bfloat16 on a GPU), loaded into a
copy of the model as the scripted server loads one. log p(completion | prompt) is measured outside the trainer,
with transformers, under the start weights rounded as a broadcast rounds them and under that broadcast: both as
inference would see them. The completion logprobs the batch carries are the start weights' own (float32), so
the trainer's importance ratio starts at 1, as after a real rollout.

Shared by tests/rehearsal/test_rl_signal.py (and whoever wants the figures).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from air.launch.prime_rl import cpu_venv
from air.rehearsal.launch import run_entry
from air.rehearsal.live_trainer import PROBE, start_trainer
from air.rehearsal.trainer_report import latest_broadcast

# One prompt, two completions: the first gets advantage +A, the second -A (the group's two rewards).
PROMPT = "Which command validates the submission?"
COMPLETIONS = ("validate", "cat README.md")
ADVANTAGE = 1.0
LR = 1e-5  # the learning rate every config in configs/ trains with (prime-rl's default is 1e-6)
# How far the gap (first minus second) must move to count: a tenth of what +-A moves it at LR on the tiny model
# (0.048-0.053 nats at both pins), 200 times what A = 0 leaves (at most 2.4e-5: weight decay, bfloat16 rounding)
TOLERANCE = 0.005
RUN_DIRS = {"v1": "run", "classic": "run/run_default"}  # where each generation's trainer publishes broadcasts


class SignalRunError(RuntimeError):
    """The trainer did not run its step, or left no broadcast to measure; the message holds its log's tail."""


@dataclass
class SignalRun:
    """One trainer step's effect on the two completions (log p summed over each completion's tokens)."""

    generation: str
    advantage: float  # the first completion's; the second's is its negation
    lr: float | None
    before: tuple[float, float]  # (first, second) under the start weights
    after: tuple[float, float]  # under the trainer's broadcast after its step
    tokens: tuple[int, int]
    trainer_s: float  # the trainer process, start to exit
    step: dict[str, Any] = field(default_factory=dict)  # its probe line: loss, grad norm, parameter change
    metrics: dict[str, Any] = field(default_factory=dict)  # what the trainer logged itself (559b447)

    @property
    def gap_before(self) -> float:
        return self.before[0] - self.before[1]

    @property
    def gap_after(self) -> float:
        return self.after[0] - self.after[1]

    @property
    def gain(self) -> float:
        """How much the first completion's logprob rose relative to the second's."""
        return self.gap_after - self.gap_before

    @property
    def verdict(self) -> str:
        """The guard's check: "rose" (the first completion gained on the second by more than TOLERANCE),
        "fell" (lost by more), or "flat"."""
        return "rose" if self.gain > TOLERANCE else "fell" if self.gain < -TOLERANCE else "flat"

    def as_dict(self) -> dict[str, Any]:
        figures = {"gap_before": self.gap_before, "gap_after": self.gap_after, "gain": self.gain}
        return {**asdict(self), **figures, "verdict": self.verdict}


def encode(model_dir: Path) -> tuple[list[int], list[list[int]]]:
    """The prompt (chat template, generation prompt) and each completion ending its turn, as token ids."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    chat = [{"role": "user", "content": PROMPT}]
    text = tokenizer.apply_chat_template(chat, tokenize=False, add_generation_prompt=True)
    prompt = tokenizer.encode(text, add_special_tokens=False)
    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    return prompt, [tokenizer.encode(c, add_special_tokens=False) + [end] for c in COMPLETIONS]


def completion_logprobs(model, prompt: list[int], completion: list[int]) -> list[float]:
    """log p(token | what precedes it) for each completion token, at temperature 1."""
    from air.serving.runtime.token_scorer import next_token_logprobs

    ids = prompt + completion
    return next_token_logprobs(model, ids, range(len(prompt), len(ids)))


def load(model_dir: Path, broadcast: Path | None = None, *, rounded_as: Path | None = None):
    """The model under its start weights, or under the full weights of ``broadcast`` (loaded as the scripted
    server loads one); ``rounded_as``: the start weights rounded to that broadcast's dtype, as a broadcast of
    them holds them (a no-op for a float32 broadcast; bfloat16 where prime-rl publishes that)."""
    import torch
    from safetensors import safe_open
    from transformers import AutoModelForCausalLM

    from air.serving.runtime.broadcast_loading import with_full_weights

    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    if broadcast is not None:
        return with_full_weights(model, broadcast)
    if rounded_as is not None:
        with safe_open(str(sorted(rounded_as.glob("*.safetensors"))[0]), "pt") as weights:
            dtype = weights.get_tensor(next(iter(weights.keys()))).dtype
        with torch.no_grad():
            for tensor in model.state_dict().values():
                tensor.copy_(tensor.to(dtype).to(tensor.dtype))
    return model


def run_signal(
    prime_rl: Path,
    generation: str,
    model_dir: Path,
    out: Path,
    advantage: float = ADVANTAGE,
    *,
    lr: float | None = LR,
    timeout_s: float = 900.0,
) -> SignalRun:
    """One step of ``prime_rl``'s trainer (its ``.venv-cpu``) on the two completions, the first with
    ``advantage``, the second with its negation (``lr`` None: prime-rl's default, 1e-6)."""
    python = cpu_venv(prime_rl) / "bin" / "python"
    out.mkdir(parents=True, exist_ok=True)
    prompt, completions = encode(model_dir)
    scored = [completion_logprobs(load(model_dir), prompt, c) for c in completions]  # what "vLLM" sampled them at
    samples = [
        {"prompt_ids": prompt, "completion_ids": c, "completion_logprobs": lp, "advantage": a}
        for c, lp, a in zip(completions, scored, (advantage, -advantage), strict=True)
    ]
    trainer_model = out / "trainer-model"  # the trainer's own copy: c87c19b writes a converted one into it
    shutil.copytree(model_dir, trainer_model, ignore=shutil.ignore_patterns("prime"), dirs_exist_ok=True)
    spec = {"model_dir": str(trainer_model), "device": "cpu", "lr": lr, "samples": samples}
    (out / "spec.json").write_text(json.dumps(spec))
    config = out / ("trainer.json" if generation == "v1" else "trainer.toml")
    entry = ["-m", "air_prime_rl.rl_signal", "write", generation, str(out / "spec.json"), str(out / "run"), str(config)]
    run_entry(python, entry, out, f"prime-rl ({generation}) could not write the batch", timeout_s)
    trainer_s = train(python, generation, config, out, timeout_s)
    broadcast = latest_broadcast(out / RUN_DIRS[generation])
    if broadcast is None or broadcast.name == "step_0":
        raise SignalRunError(f"the trainer published no update under {out / RUN_DIRS[generation]}")
    # Both sides as an inference server would hold them: the start weights rounded as a broadcast rounds them,
    # and the step's broadcast (without the rounding, A = 0 would seem to move the gap by ~5e-5).
    before, after = load(model_dir, rounded_as=broadcast), load(model_dir, broadcast)
    probe = (out / PROBE).read_text().splitlines() if (out / PROBE).exists() else []
    return SignalRun(
        generation=generation,
        advantage=advantage,
        lr=lr,
        before=tuple(math.fsum(completion_logprobs(before, prompt, c)) for c in completions),
        after=tuple(math.fsum(completion_logprobs(after, prompt, c)) for c in completions),
        tokens=(len(completions[0]), len(completions[1])),
        trainer_s=trainer_s,
        step=json.loads(probe[-1]) if probe else {},
        metrics=trainer_metrics(out / "run" / "metrics.jsonl"),
    )


def trainer_metrics(path: Path) -> dict[str, Any]:
    """The figures prime-rl's trainer logged to its file monitor (559b447 has one; c87c19b's logs nowhere)."""
    merged: dict[str, Any] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        merged.update(json.loads(line))
    return merged


def train(python: Path, generation: str, config: Path, out: Path, timeout_s: float) -> float:
    """prime-rl's trainer to its exit (one step); its wall time, or SignalRunError with its log's tail."""
    started = time.monotonic()
    trainer = start_trainer(python, generation, config, out, config)
    try:
        while trainer.exited() is None:
            if time.monotonic() - started > timeout_s:
                raise SignalRunError(f"the trainer ran past {timeout_s:.0f} s: {trainer.log}\n{trainer.tail()}")
            time.sleep(0.5)
    finally:
        trainer.stop(grace=5)
    if trainer.exited() != 0:
        raise SignalRunError(f"the trainer exited with {trainer.exited()}; its log: {trainer.log}\n{trainer.tail()}")
    return time.monotonic() - started


__all__ = ["ADVANTAGE", "COMPLETIONS", "LR", "PROMPT", "TOLERANCE", "SignalRun", "SignalRunError", "run_signal"]
