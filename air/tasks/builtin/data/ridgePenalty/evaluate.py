"""Evaluate a ridgePenalty submission.

Usage: python evaluate.py --submission_file submission.csv

submission.csv holds one number: the ridge penalty alpha (0 or more; a header line `alpha` above it
is allowed). The model is fixed: the features of data/train.csv are standardised with the training
rows' means and standard deviations, and the ridge coefficients are solved in closed form with that
penalty. Prints one JSON object with r2, the R^2 of the predictions on held-out rows (higher is
better, 1 is perfect).

The held-out rows: when the evaluation is given a seed (the environment variable AIR_EVAL_SEED, which
the training environment sets), they are a resample (with replacement) of the hidden held-out set
drawn from that seed, so scores vary a little from one evaluation to the next; run by hand without
one, the whole set is used (the task's recorded baseline score).
"""

import argparse
import json
import math
import os
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
TRAIN_FILE = HERE / "data" / "train.csv"
HELDOUT_FILE = HERE / "data" / "heldout.csv"
MAX_ALPHA = 1e12


def fail(message):
    print(f"Evaluation error: {message}", file=sys.stderr)
    sys.exit(1)


def read_alpha(path):
    try:
        text = Path(path).read_text(errors="replace")
    except FileNotFoundError:
        fail(f"{path} was not found: write the penalty alpha into it, e.g. echo 100 > submission.csv")
    except OSError as exc:
        fail(f"could not read {path}: {exc}")
    cells = [cell.strip() for line in text.splitlines() for cell in line.split(",") if cell.strip()]
    if cells and cells[0].lower() == "alpha":
        cells = cells[1:]
    if len(cells) != 1:
        shown = text.strip()[:80]
        fail(f"{path} must hold exactly one number, the penalty alpha; it holds {shown!r}.")
    try:
        alpha = float(cells[0])
    except ValueError:
        fail(f"{path} must hold a number, the penalty alpha; {cells[0][:40]!r} is not one.")
    if not math.isfinite(alpha) or alpha < 0 or alpha > MAX_ALPHA:
        fail(f"alpha must be a finite number from 0 to {MAX_ALPHA:g}; got {alpha!r}.")
    return alpha


def read_rows(path, what):
    if not path.is_file():
        fail(f"{path.name} was not found next to evaluate.py ({what}).")
    table = np.loadtxt(path, delimiter=",", skiprows=1, ndmin=2)
    return table[:, :-1], table[:, -1]


def evaluation_rows(count):
    seed = os.environ.get("AIR_EVAL_SEED", "")
    if not seed.isdigit():
        return np.arange(count)
    return np.random.default_rng(int(seed)).integers(0, count, size=count)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--submission_file", default="submission.csv")
    args = parser.parse_args()
    alpha = read_alpha(args.submission_file)
    x_train, y_train = read_rows(TRAIN_FILE, "the training rows")
    x_held, y_held = read_rows(HELDOUT_FILE, "a hidden file, present only while the task is evaluated")
    mean, std = x_train.mean(axis=0), x_train.std(axis=0)
    z = (x_train - mean) / std
    coef = np.linalg.solve(z.T @ z + alpha * np.eye(z.shape[1]), z.T @ (y_train - y_train.mean()))
    rows = evaluation_rows(len(y_held))
    predicted = ((x_held[rows] - mean) / std) @ coef + y_train.mean()
    actual = y_held[rows]
    r2 = 1.0 - float(((actual - predicted) ** 2).sum() / ((actual - actual.mean()) ** 2).sum())
    print(json.dumps({"r2": round(r2, 4)}))


if __name__ == "__main__":
    main()
