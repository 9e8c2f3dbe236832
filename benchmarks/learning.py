"""Does SmolLM2-135M-Instruct learn under GRPO on this CPU? A learning run beside a control from the same start.

    uv run --group dev --extra tiny python benchmarks/learning.py [--steps 30] [--lr 2e-5] [--json]
        [--batch-size 16] [--group 4] [--max-turns 2] [--max-tokens 32] [--out outputs/learning]

Two runs of ``air standalone``'s own step loop on the built-in ``dial`` game (simple_env: no Docker),
each against a fresh policy server sampling SmolLM2 (``--policy smollm2``'s server, loading broadcasts):
one learns with ``--lr``, the control with learning rate 0; same seed, same start weights. After every step
a GRPO update (group-normalised advantages, the policy-gradient loss over the replies' tokens, one
optimizer step: on-policy, so the importance ratio is 1) runs on a trainer copy of the model, its full
weights are written as a broadcast and the server loads them (``/update_weights``), so the next step
samples from the updated model. The control skips the backward pass: at learning rate 0 the weights cannot
change. Each rollout is saved as a trajectory (``air view <out>``).

The comparison: per-rollout rewards of the last half of the steps, learning minus control, with Welch's
t statistic and a one-sided permutation p-value (10,000 shuffles). Figures go to experiments.md.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from air.env.actions import parse_action  # noqa: E402
from air.env.trajectories import BaselineInfo, TrajectoryRecord, Turn, write_trajectory  # noqa: E402
from air.runs.standalone import run_standalone  # noqa: E402
from air.runs.standalone_settings import StandaloneSettings  # noqa: E402
from air.serving.server import PolicyServer  # noqa: E402
from air.serving.smollm2 import prepare_smollm2  # noqa: E402


def assistant_spans(tokenizer, messages: list[dict[str, Any]]) -> tuple[list[int], list[bool]]:
    """The conversation's token ids under the chat template, and which of them the model wrote (each
    assistant turn's tokens with its end-of-turn token: what the policy gradient trains)."""
    ids = tokenizer.apply_chat_template(messages, tokenize=True)
    mask = [False] * len(ids)
    for place, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        start = len(tokenizer.apply_chat_template(messages[:place], tokenize=True, add_generation_prompt=True))
        end = len(tokenizer.apply_chat_template(messages[: place + 1], tokenize=True))
        mask[start:end] = [True] * (end - start)
    return ids, mask


def grpo_advantages(rewards: list[float]) -> list[float]:
    mean = sum(rewards) / len(rewards)
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / len(rewards))
    return [0.0 if std < 1e-9 else (r - mean) / std for r in rewards]


def text_of(message: dict[str, Any]) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [])


class GrpoLearner:
    """A StepLogger of ``run_standalone`` that trains after each step and broadcasts to the server."""

    def __init__(self, model_dir: Path, server: PolicyServer, lr: float, out: Path, label: str) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=lr, weight_decay=0.0)
        self.lr, self.server, self.out, self.label = lr, server, out, label
        self.trajectories = out / "trajectories"
        self.history: list[dict[str, Any]] = []

    def start(self, settings, output_dir) -> None:
        pass

    def finish(self, summary) -> None:
        pass

    def log_step(self, stats: dict[str, Any], groups: list[list[dict[str, Any]]]) -> None:
        started = time.perf_counter()
        samples = []
        rewards_by_rollout = []
        for group in groups:
            kept = [o for o in group if not o.get("error")]
            advantages = grpo_advantages([float(o.get("reward") or 0.0) for o in kept]) if kept else []
            for output, advantage in zip(kept, advantages, strict=True):
                messages = [*output["prompt"], *output["completion"]]
                samples.append((messages, advantage))
                rewards_by_rollout.append(float(output.get("reward") or 0.0))
                self.save_trajectory(stats["step"], output, messages, advantage)
        loss, grad_norm, tokens = self.update(samples)
        self.history.append(
            {
                "step": stats["step"],
                "reward_mean": stats["reward_mean"],
                "rewards": rewards_by_rollout,
                "format_errors_per_rollout": sum(
                    float((o.get("metrics") or {}).get("format_errors", 0.0)) for g in groups for o in g
                )
                / max(1, sum(len(g) for g in groups)),
                "loss": loss,
                "grad_norm": grad_norm,
                "trained_tokens": tokens,
                "step_seconds": stats["seconds"],
                "train_seconds": time.perf_counter() - started,
            }
        )
        print(
            f"[{self.label}] step {stats['step']}: reward {stats['reward_mean']:+.4f} "
            f"loss {loss:+.4f} grad {grad_norm:.3f} ({time.perf_counter() - started:.1f} s training)",
            flush=True,
        )

    def update(self, samples: list[tuple[list[dict[str, Any]], float]]) -> tuple[float, float, int]:
        """One GRPO step: -advantage x log p(reply tokens), averaged over the batch's reply tokens."""
        torch = self.torch
        prepared = [(assistant_spans(self.tokenizer, m), a) for m, a in samples if a != 0.0]
        total = sum(sum(mask) for (_, mask), _ in prepared)
        if not prepared or total == 0 or self.lr == 0:
            return 0.0, 0.0, total  # the control: learning rate 0 changes nothing, so no backward pass
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for (ids, mask), advantage in prepared:
            logits = self.model(input_ids=torch.tensor([ids])).logits[0, :-1].float()
            logprobs = torch.log_softmax(logits, -1).gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
            weights = torch.tensor(mask[1:], dtype=torch.float32)
            loss = -(advantage * logprobs * weights).sum() / total
            loss.backward()
            loss_sum += loss.item()
        grad_norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0))
        self.optimizer.step()
        self.broadcast()
        return loss_sum, grad_norm, total

    def broadcast(self) -> None:
        """The full weights as a broadcast folder, loaded by the server before the next step's rollouts."""
        import httpx
        from safetensors.torch import save_file

        folder = self.out / "broadcasts" / f"step-{len(self.history) + 1}"
        folder.mkdir(parents=True, exist_ok=True)
        state = {k: v.detach().clone().contiguous() for k, v in self.model.state_dict().items()}
        save_file(state, str(folder / "model.safetensors"))
        root = self.server.base_url.removesuffix("/v1")
        answer = httpx.post(f"{root}/update_weights", json={"weight_dir": str(folder)}, timeout=300)
        answer.raise_for_status()
        for old in sorted((self.out / "broadcasts").iterdir())[:-1]:  # keep the last one only: 540 MB each
            for file in old.iterdir():
                file.unlink()
            old.rmdir()

    def save_trajectory(self, step: int, output: dict[str, Any], messages: list[dict[str, Any]], advantage: float):
        turns = []
        replies = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
        for index, place in enumerate(replies, start=1):
            text = text_of(messages[place])
            parsed = parse_action(text)
            following = messages[place + 1] if place + 1 < len(messages) else None
            turns.append(
                Turn(
                    index=index,
                    model_text=text,
                    command=parsed.command,
                    format_error=parsed.error,
                    output=text_of(following) if following and following["role"] == "user" else "",
                )
            )
        metrics = {k: float(v) for k, v in (output.get("metrics") or {}).items() if isinstance(v, int | float)}
        info = output.get("info") or {}
        record = TrajectoryRecord(
            id=uuid.uuid4().hex,
            task="dial",
            group_id=info.get("group_id"),
            step=step,
            model="SmolLM2-135M-Instruct",
            policy=f"smollm2 ({self.label}, lr {self.lr:g})",
            system_prompt=text_of(messages[0]) if messages and messages[0]["role"] == "system" else None,
            started_at=datetime.now(UTC),
            exit_status="completed",
            baseline=BaselineInfo(metric="score", score=metrics.get("baseline_score")),
            reward=float(output.get("reward") or 0.0),
            advantage=advantage,
            metrics=metrics,
            turns=turns,
        )
        write_trajectory(record, self.trajectories)


def one_run(label: str, lr: float, args: argparse.Namespace, model_dir: Path) -> list[dict[str, Any]]:
    out = Path(args.out) / label
    server = PolicyServer("smollm2", vllm_model=model_dir, seed=args.seed, load_broadcasts=True).start()
    try:
        learner = GrpoLearner(model_dir, server, lr, out, label)
        settings = StandaloneSettings(
            env="simple_env",
            steps=args.steps,
            batch_size=args.batch_size,
            rollouts_per_example=args.group,
            max_turns=args.max_turns,
            base_url=server.base_url,
            model=server.model_name,
            temperature=args.temperature,
            max_tokens=args.max_tokens,
            seed=args.seed,
            output_dir=str(out / "run"),
            overwrite=True,
            model_timeout=900,
        )
        asyncio.run(run_standalone(settings, loggers=[learner]))
    finally:
        server.stop()
    (out / "history.json").write_text(json.dumps(learner.history, indent=1))
    return learner.history


def compare(learn: list[dict[str, Any]], control: list[dict[str, Any]], rounds: int = 10_000) -> dict[str, Any]:
    """Rewards of the last half of the steps, learning vs control: difference, Welch t, permutation p."""
    half = len(learn) // 2
    a = [r for step in learn[half:] for r in step["rewards"]]
    b = [r for step in control[half:] for r in step["rewards"]]
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    var_a = sum((x - mean_a) ** 2 for x in a) / max(1, len(a) - 1)
    var_b = sum((x - mean_b) ** 2 for x in b) / max(1, len(b) - 1)
    t = (mean_a - mean_b) / math.sqrt(var_a / len(a) + var_b / len(b) + 1e-18)
    rng, pooled, observed, hits = random.Random(0), a + b, mean_a - mean_b, 0
    for _ in range(rounds):
        rng.shuffle(pooled)
        hits += (sum(pooled[: len(a)]) / len(a) - sum(pooled[len(a) :]) / len(b)) >= observed
    return {
        "steps_compared": f"{half + 1}..{len(learn)}",
        "rollouts_each": [len(a), len(b)],
        "learn_mean": mean_a,
        "control_mean": mean_b,
        "difference": observed,
        "welch_t": t,
        "permutation_p_one_sided": (hits + 1) / (rounds + 1),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--lr", type=float, default=2e-5)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--group", type=int, default=4)
    parser.add_argument("--max-turns", type=int, default=2)
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="outputs/learning")
    parser.add_argument("--only", choices=["learn", "control"], help="run one of the two")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    model_dir = prepare_smollm2().path
    started = time.perf_counter()
    runs = {}
    for label, lr in (("learn", args.lr), ("control", 0.0)):
        if args.only in (None, label):
            runs[label] = one_run(label, lr, args, model_dir)
    result: dict[str, Any] = {"settings": vars(args), "seconds": time.perf_counter() - started}
    for label, history in runs.items():
        result[label] = [{k: v for k, v in step.items() if k != "rewards"} for step in history]
    if len(runs) == 2:
        result["comparison"] = compare(runs["learn"], runs["control"])
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "result.json").write_text(json.dumps(result, indent=1))
    if args.json:
        print(json.dumps(result))
    else:
        for step in range(max(len(h) for h in runs.values())):
            cells = [f"{runs[k][step]['reward_mean']:+.4f}" for k in runs if step < len(runs[k])]
            print(f"step {step + 1:3d}  " + "  ".join(f"{k} {c}" for k, c in zip(runs, cells, strict=False)))
        if "comparison" in result:
            print(json.dumps(result["comparison"], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
