"""The statistics and the figure of benchmarks/learning.py: pure functions over its per-step rows."""

from __future__ import annotations

import math
import random
from pathlib import Path
from typing import Any


def last_quarter(steps: list[dict[str, Any]], key: str = "reward") -> list[float]:
    """The per-step values of the last quarter of the steps (at least one)."""
    values = [s[key] for s in sorted(steps, key=lambda s: s["step"]) if s.get(key) is not None]
    keep = max(1, len(values) // 4)
    return values[-keep:]


def welch_and_permutation(a: list[float], b: list[float], rounds: int = 10_000) -> dict[str, float]:
    """Mean of ``a`` minus mean of ``b``, Welch's t, and the one-sided permutation p of a difference this large
    (the share of relabellings of the pooled values whose difference is at least the observed, +1 smoothed)."""
    mean_a, mean_b = sum(a) / len(a), sum(b) / len(b)
    var_a = sum((x - mean_a) ** 2 for x in a) / max(1, len(a) - 1)
    var_b = sum((x - mean_b) ** 2 for x in b) / max(1, len(b) - 1)
    t = (mean_a - mean_b) / math.sqrt(var_a / len(a) + var_b / len(b) + 1e-18)
    rng, pooled, observed, hits = random.Random(0), a + b, mean_a - mean_b, 0
    for _ in range(rounds):
        rng.shuffle(pooled)
        hits += (sum(pooled[: len(a)]) / len(a) - sum(pooled[len(a) :]) / len(b)) >= observed - 1e-12
    return {"n_learn": len(a), "n_control": len(b), "learn_mean": mean_a, "control_mean": mean_b,
            "difference": observed, "welch_t": t, "permutation_p_one_sided": (hits + 1) / (rounds + 1)}  # fmt: skip


def _band(arms: list[dict[str, Any]], key: str) -> tuple[list[int], list[float], list[float], list[float]]:
    """Per step across seeds: mean, min and max of ``key``."""
    by_step: dict[int, list[float]] = {}
    for arm in arms:
        for row in arm["steps"]:
            if row.get(key) is not None:
                by_step.setdefault(row["step"], []).append(row[key])
    steps = sorted(by_step)
    return (steps, [sum(by_step[s]) / len(by_step[s]) for s in steps], [min(by_step[s]) for s in steps],
            [max(by_step[s]) for s in steps])  # fmt: skip


def plot(seeds: dict[int, dict[str, dict]], png: Path) -> None:
    """Reward per step of both arms (mean across seeds, a band from the lowest to the highest seed), the task
    score beneath, then the valid-command share."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(3, 1, figsize=(8, 8.5), sharex=True, height_ratios=[3, 2, 1.3])
    colours = {"learn": "tab:blue", "control": "tab:grey"}
    panels = (("reward", "mean reward"), ("task_score", "ridgePenalty R^2 (mean)"), ("valid_share", "valid command"))
    for axis, (key, title) in zip(axes, panels, strict=True):
        for label, colour in colours.items():
            arms = [arms_of_seed[label] for arms_of_seed in seeds.values() if label in arms_of_seed]
            if not arms:
                continue
            steps, mean, low, high = _band(arms, key)
            lr = arms[0]["lr"]
            axis.plot(steps, mean, color=colour, label=f"{label} (lr {lr:g}, {len(arms)} seed{'s' * (len(arms) > 1)})")
            axis.fill_between(steps, low, high, color=colour, alpha=0.2, linewidth=0)
        axis.set_ylabel(title)
        axis.grid(alpha=0.3)
    axes[2].set_ylim(-0.05, 1.05)
    axes[0].legend(loc="upper left")
    axes[-1].set_xlabel("step (8 rollouts each)")
    axes[0].set_title("SmolLM2-135M through prime-rl's rl on 2 CPU cores: ridgePenalty, learn vs lr 0")
    figure.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(png, dpi=110)
    plt.close(figure)
