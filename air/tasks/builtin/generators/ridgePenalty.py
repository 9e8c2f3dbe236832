"""Deterministic generator for the ridgePenalty task's synthetic data.

Writes data/train.csv (60 rows the agent sees) and data/heldout.csv (400 rows it never sees, the
task's secret) into --out (default: the task's committed data folder). Regenerating reproduces the
committed files byte for byte: every value is formatted explicitly.

    python generators/ridgePenalty.py                 # rewrite the committed files
    python generators/ridgePenalty.py --out /tmp/x    # write them elsewhere
    python generators/ridgePenalty.py --curve         # print R^2 on the held-out rows per penalty

Why this shape: few rows and many correlated features, so an unpenalised fit overfits and a heavy
penalty underfits; the held-out R^2 peaks near alpha 10 and the starter's 100 leaves a third of it on
the table. A small model can move the score by the one number it sets, in either direction.

This script belongs to the task authors; it is not copied to the agent.
"""

import argparse
from pathlib import Path

import numpy as np

SEED = 7311
N_TRAIN = 60
N_HELDOUT = 400
N_FEATURES = 40
NOISE = 2.0
TASK_DIR = Path(__file__).resolve().parent.parent / "data" / "ridgePenalty" / "data"


def make_data() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(SEED)
    mixing = rng.normal(size=(N_FEATURES, N_FEATURES)) * 0.3 + np.eye(N_FEATURES)  # correlated features
    x = rng.normal(size=(N_TRAIN + N_HELDOUT, N_FEATURES)) @ mixing
    weights = rng.normal(size=N_FEATURES) * np.exp(-np.arange(N_FEATURES) / 8)  # a few features matter most
    y = x @ weights + rng.normal(size=N_TRAIN + N_HELDOUT) * NOISE
    return np.round(x, 4), np.round(y, 4)


def write_csv(path: Path, x: np.ndarray, y: np.ndarray) -> None:
    header = ",".join([f"x{i}" for i in range(x.shape[1])] + ["y"])
    lines = [header] + [",".join(f"{v:.4f}" for v in (*row, target)) for row, target in zip(x, y)]
    path.write_text("\n".join(lines) + "\n")


def held_out_r2(x: np.ndarray, y: np.ndarray, alpha: float) -> float:
    """The evaluator's fit (standardise on the training rows, closed-form ridge), scored on the held-out rows."""
    xtr, ytr, xte, yte = x[:N_TRAIN], y[:N_TRAIN], x[N_TRAIN:], y[N_TRAIN:]
    mean, std = xtr.mean(0), xtr.std(0)
    z = (xtr - mean) / std
    coef = np.linalg.solve(z.T @ z + alpha * np.eye(N_FEATURES), z.T @ (ytr - ytr.mean()))
    predicted = ((xte - mean) / std) @ coef + ytr.mean()
    return float(1 - ((yte - predicted) ** 2).sum() / ((yte - yte.mean()) ** 2).sum())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=TASK_DIR)
    parser.add_argument("--curve", action="store_true")
    args = parser.parse_args()
    x, y = make_data()
    if args.curve:
        for alpha in (0, 0.1, 1, 3, 10, 30, 100, 300, 1000, 10000):
            print(f"alpha {alpha:>7g}  r2 {held_out_r2(x, y, alpha):.4f}")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    write_csv(args.out / "train.csv", x[:N_TRAIN], y[:N_TRAIN])
    write_csv(args.out / "heldout.csv", x[N_TRAIN:], y[N_TRAIN:])


if __name__ == "__main__":
    main()
