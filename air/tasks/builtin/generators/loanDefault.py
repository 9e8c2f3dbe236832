"""Deterministic generator for the loanDefault task's synthetic data.

Writes train.csv, test.csv and answer.csv into --out (default: the task's
committed data folder) and, unless --out is given, also the task's
sample_submission.csv. Regenerating reproduces the committed files byte for
byte: every value is formatted explicitly, independent of pandas.

    python generators/loanDefault.py                 # rewrite the committed files
    python generators/loanDefault.py --out /tmp/x    # write the data files elsewhere

This script belongs to the task authors; it is not copied to the agent.
"""

import argparse
import math
from pathlib import Path

import numpy as np

SEED = 7310
SCALE = 3.5  # sharpness of the default probability (higher = less label noise)
N_TRAIN = 800
N_TEST = 400
TASK_DIR = Path(__file__).resolve().parent.parent / "data" / "loanDefault"

EMPLOYMENT = ["salaried", "self_employed", "contract", "unemployed"]
HOME = ["own", "mortgage", "rent"]
PURPOSE = ["car", "education", "home_improvement", "debt_consolidation", "business", "medical"]
TERMS = [12, 24, 36, 60]

FEATURES = [
    "age",
    "annual_income",
    "employment_type",
    "years_employed",
    "home_ownership",
    "loan_amount",
    "loan_term_months",
    "loan_purpose",
    "credit_history_years",
    "num_late_payments",
    "credit_utilization",
    "num_open_accounts",
]
LABEL = "defaulted"


def generate():
    rng = np.random.default_rng(SEED)
    n = N_TRAIN + N_TEST

    age = np.clip(np.round(rng.normal(41.0, 12.0, n)), 21, 75).astype(int)
    employment = rng.choice(len(EMPLOYMENT), size=n, p=[0.55, 0.18, 0.17, 0.10])
    income = rng.lognormal(math.log(52000.0), 0.45, n)
    income = np.where(employment == 3, income * 0.35, income)
    income = np.round(np.clip(income, 8000, 400000) / 100.0) * 100.0
    years_employed = np.minimum(rng.exponential(6.0, n), age - 18)
    years_employed = np.where(employment == 3, 0.0, np.round(years_employed, 1))
    home = rng.choice(len(HOME), size=n, p=[0.25, 0.40, 0.35])
    loan = np.round(np.clip(rng.lognormal(math.log(14000.0), 0.6, n), 1000, 90000) / 50.0) * 50.0
    term = np.array(TERMS)[rng.choice(len(TERMS), size=n, p=[0.15, 0.30, 0.35, 0.20])]
    purpose = rng.choice(len(PURPOSE), size=n, p=[0.22, 0.12, 0.16, 0.28, 0.10, 0.12])
    history = np.round(np.minimum(rng.gamma(2.5, 4.0, n), age - 18), 1)
    late = rng.poisson(np.where(rng.random(n) < 0.2, 2.5, 0.5))
    utilization = np.round(rng.beta(2.0, 3.0, n), 3)
    accounts = rng.poisson(3.5, n) + 1

    # Missing values (the true values still drive the label except where noted).
    miss_income = rng.random(n) < 0.06
    miss_employment = rng.random(n) < 0.04
    miss_history = rng.random(n) < 0.08
    miss_util = rng.random(n) < 0.05

    dti = loan / income
    logit = (
        -2.3
        + 2.4 * np.clip(dti - 0.3, 0.0, 1.5)
        + 1.7 * (utilization > 0.7)
        + 1.2 * utilization
        + 0.6 * np.minimum(late, 4)
        + np.array([0.0, 0.35, 0.6, 1.4])[employment]
        + 0.0018 * (age - 45) ** 2
        - 0.09 * np.minimum(history, 15.0)
        + 0.5 * miss_history
        + 0.45 * (term == 60)
        + 1.1 * ((home == 2) & (purpose == 4))
        + 0.9 * ((purpose == 1) & (age < 27))
        - 0.5 * ((home == 0) & (late == 0))
    )
    prob = 1.0 / (1.0 + np.exp(-SCALE * logit))
    label = (rng.random(n) < prob).astype(int)

    rows = []
    for i in range(n):
        rows.append({
            "id": i + 1,
            "age": str(age[i]),
            "annual_income": "" if miss_income[i] else f"{income[i]:.0f}",
            "employment_type": "" if miss_employment[i] else EMPLOYMENT[employment[i]],
            "years_employed": f"{years_employed[i]:.1f}",
            "home_ownership": HOME[home[i]],
            "loan_amount": f"{loan[i]:.0f}",
            "loan_term_months": str(term[i]),
            "loan_purpose": PURPOSE[purpose[i]],
            "credit_history_years": "" if miss_history[i] else f"{history[i]:.1f}",
            "num_late_payments": str(late[i]),
            "credit_utilization": "" if miss_util[i] else f"{utilization[i]:.3f}",
            "num_open_accounts": str(accounts[i]),
            LABEL: str(label[i]),
        })
    return rows


def write_csv(path, header, rows):
    lines = [",".join(header)]
    lines += [",".join(str(row[col]) for col in header) for row in rows]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8", newline="\n")


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None, help="folder for train.csv, test.csv, answer.csv")
    args = parser.parse_args()
    out = args.out if args.out is not None else TASK_DIR / "data"
    out.mkdir(parents=True, exist_ok=True)
    rows = generate()
    train, test = rows[:N_TRAIN], rows[N_TRAIN:]
    write_csv(out / "train.csv", ["id", *FEATURES, LABEL], train)
    write_csv(out / "test.csv", ["id", *FEATURES], test)
    write_csv(out / "answer.csv", ["id", LABEL], test)
    if args.out is None:
        sample = [{"id": row["id"], LABEL: 0} for row in test]
        write_csv(TASK_DIR / "sample_submission.csv", ["id", LABEL], sample)


if __name__ == "__main__":
    main()
