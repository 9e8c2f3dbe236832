"""Baseline for the loanDefault task.

A tiny logistic regression on two numeric columns (number of late payments and
credit utilisation), fitted with a fixed number of gradient-descent steps using
numpy only. Missing values are replaced by the training mean. Writes
submission.csv next to this script.
"""

from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
FEATURES = ["num_late_payments", "credit_utilization"]
LABEL = "defaulted"


def main():
    train = pd.read_csv(HERE / "data" / "train.csv")
    test = pd.read_csv(HERE / "data" / "test.csv")

    x_train = train[FEATURES].astype(float)
    mean = x_train.mean()
    x_train = x_train.fillna(mean)
    std = x_train.std()

    def design(frame):
        x = ((frame[FEATURES].astype(float).fillna(mean) - mean) / std).to_numpy()
        return np.column_stack([np.ones(len(x)), x])

    x = design(train)
    y = train[LABEL].to_numpy(dtype=float)
    weights = np.zeros(x.shape[1])
    for _ in range(500):
        p = 1.0 / (1.0 + np.exp(-(x @ weights)))
        weights -= 0.5 * (x.T @ (p - y)) / len(y)

    prediction = (design(test) @ weights > 0).astype(int)
    submission = pd.DataFrame({"id": test["id"].to_numpy(), LABEL: prediction})
    submission.to_csv(HERE / "submission.csv", index=False)


if __name__ == "__main__":
    main()
