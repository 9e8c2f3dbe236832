"""Evaluate a loanDefault submission.

Usage: python evaluate.py --submission_file submission.csv

The submission must be a CSV with the columns `id` and `defaulted` and exactly
one row per id of data/test.csv; `defaulted` must be 0 or 1. Prints a single
JSON object with the accuracy. Problems are reported on stderr with a non-zero
exit status.
"""

import argparse
import json
import sys
from pathlib import Path

import numpy as np
import pandas as pd

HERE = Path(__file__).resolve().parent
ANSWER_FILE = HERE / "data" / "answer.csv"
ID = "id"
LABEL = "defaulted"


def fail(message):
    print(f"Evaluation error: {message}", file=sys.stderr)
    sys.exit(1)


def read_csv(path, what):
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        fail(f"the {what} {path} is empty.")
    except Exception as exc:  # malformed CSV, unreadable file, ...
        fail(f"could not read the {what} {path}: {exc}")


def integer_ids(column, what):
    values = pd.to_numeric(column, errors="coerce").to_numpy(dtype=float)
    bad = ~np.isfinite(values) | (values != np.round(values))
    if bad.any():
        fail(f"the {what} has {int(bad.sum())} value(s) in column '{ID}' that are not integers, "
             f"e.g. {column[bad].iloc[0]!r}.")
    return values.astype(np.int64)


def main():
    parser = argparse.ArgumentParser(description="Evaluate a loanDefault submission.")
    parser.add_argument("--submission_file", default=str(HERE / "submission.csv"),
                        help="path to the submission CSV (default: submission.csv next to this script)")
    args = parser.parse_args()

    if not ANSWER_FILE.is_file():
        fail(f"the answer file {ANSWER_FILE} was not found; it is hidden during the task and only "
             "present while the submission is being evaluated.")
    answer = read_csv(ANSWER_FILE, "answer file")

    path = Path(args.submission_file)
    if not path.is_file():
        fail(f"submission file {path} not found. Write your predictions for data/test.csv to it "
             f"as a CSV with the columns '{ID}' and '{LABEL}'.")
    submission = read_csv(path, "submission file")

    missing = [col for col in (ID, LABEL) if col not in submission.columns]
    if missing:
        fail(f"the submission is missing the column(s) {missing}; found columns "
             f"{[str(col) for col in submission.columns]}, expected '{ID}' and '{LABEL}'.")
    if len(submission) != len(answer):
        fail(f"the submission has {len(submission)} rows but data/test.csv has {len(answer)}; "
             "submit exactly one row per test id.")

    sub_ids = integer_ids(submission[ID], "submission")
    duplicated = pd.Series(sub_ids).duplicated()
    if duplicated.any():
        fail(f"the submission repeats ids, e.g. {int(sub_ids[duplicated.to_numpy()][0])}.")
    answer_ids = answer[ID].to_numpy(dtype=np.int64)
    unknown = np.setdiff1d(sub_ids, answer_ids)
    if len(unknown):
        fail(f"the submission's ids do not match data/test.csv: {len(unknown)} id(s) are not test ids, "
             f"e.g. {int(unknown[0])}.")

    labels = submission[LABEL]
    if labels.dtype == bool:
        labels = labels.astype(int)
    predicted = pd.to_numeric(labels, errors="coerce").to_numpy(dtype=float)
    invalid = ~np.isin(predicted, [0.0, 1.0])
    if invalid.any():
        fail(f"column '{LABEL}' must contain only 0 or 1; found {int(invalid.sum())} other value(s), "
             f"e.g. {labels[invalid].iloc[0]!r}.")

    predicted_by_id = pd.Series(predicted.astype(np.int64), index=sub_ids)
    truth = answer[LABEL].to_numpy(dtype=np.int64)
    accuracy = float(np.mean(predicted_by_id.loc[answer_ids].to_numpy() == truth))
    print(json.dumps({"accuracy": round(accuracy, 4)}))


if __name__ == "__main__":
    main()
