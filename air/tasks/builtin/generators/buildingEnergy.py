"""Deterministic generator for the buildingEnergy task's synthetic data.

Writes train.csv, test.csv and answer.csv into --out (default: the task's
committed data folder) and, unless --out is given, also the task's
sample_submission.csv. Regenerating reproduces the committed files byte for
byte: every value is formatted explicitly, independent of pandas.

    python generators/buildingEnergy.py                 # rewrite the committed files
    python generators/buildingEnergy.py --out /tmp/x    # write the data files elsewhere

This script belongs to the task authors; it is not copied to the agent.
"""

import argparse
import math
from pathlib import Path

import numpy as np

SEED = 4471
N_TRAIN = 1000
N_TEST = 500
TASK_DIR = Path(__file__).resolve().parent.parent / "data" / "buildingEnergy"

INSULATION = ["poor", "average", "good"]
CLIMATE = ["mild", "temperate", "cold", "very_cold"]
HEATING = ["gas", "electric", "heat_pump", "oil"]

FEATURES = [
    "floor_area_m2",
    "building_age_years",
    "num_occupants",
    "insulation",
    "climate_zone",
    "heating_degree_days",
    "heating_type",
    "window_to_wall_ratio",
    "thermostat_setpoint_c",
    "has_solar_panels",
]
TARGET = "annual_energy_mwh"


def generate():
    rng = np.random.default_rng(SEED)
    n = N_TRAIN + N_TEST

    area = np.round(np.clip(rng.lognormal(math.log(140.0), 0.45, n), 40.0, 600.0), 1)
    age = np.clip(np.round(rng.gamma(2.0, 18.0, n)), 0, 120).astype(int)
    occupants = np.clip(rng.poisson(np.clip(area / 60.0, 1.0, 6.0)) + 1, 1, 9)
    # Newer buildings are better insulated.
    p_good = np.clip(0.55 - age / 150.0, 0.05, 0.6)
    p_poor = np.clip(0.05 + age / 130.0, 0.05, 0.7)
    u = rng.random(n)
    insulation = np.where(u < p_poor, 0, np.where(u < 1.0 - p_good, 1, 2))
    climate = rng.choice(len(CLIMATE), size=n, p=[0.25, 0.35, 0.25, 0.15])
    hdd = np.round(np.array([1400.0, 2600.0, 3800.0, 5200.0])[climate] * rng.lognormal(0.0, 0.12, n))
    heating = rng.choice(len(HEATING), size=n, p=[0.45, 0.2, 0.25, 0.1])
    window = np.round(rng.uniform(0.1, 0.6, n), 3)
    setpoint = np.round(np.clip(rng.normal(20.5, 1.2, n), 17.0, 24.0), 1)
    solar = (rng.random(n) < np.where(age < 25, 0.35, 0.12)).astype(int)

    u_value = np.array([1.7, 1.0, 0.55])[insulation] * (1.0 + 0.004 * age)
    window_factor = 1.0 + 1.2 * np.maximum(window - 0.3, 0.0)
    setpoint_factor = np.exp(0.08 * (setpoint - 20.0))
    efficiency = np.array([0.9, 1.0, 3.2, 0.82])[heating]
    heat = 0.00004 * area * hdd * u_value * window_factor * setpoint_factor / efficiency
    appliances = 1.1 + 0.85 * occupants + 0.012 * area
    solar_offset = solar * np.minimum(3.8, 0.02 * area)
    energy = np.maximum((heat + appliances - solar_offset) * rng.lognormal(0.0, 0.08, n), 0.5)

    miss_insulation = rng.random(n) < 0.05
    miss_hdd = rng.random(n) < 0.04
    miss_setpoint = rng.random(n) < 0.06

    rows = []
    for i in range(n):
        rows.append({
            "id": i + 1,
            "floor_area_m2": f"{area[i]:.1f}",
            "building_age_years": str(age[i]),
            "num_occupants": str(occupants[i]),
            "insulation": "" if miss_insulation[i] else INSULATION[insulation[i]],
            "climate_zone": CLIMATE[climate[i]],
            "heating_degree_days": "" if miss_hdd[i] else f"{hdd[i]:.0f}",
            "heating_type": HEATING[heating[i]],
            "window_to_wall_ratio": f"{window[i]:.3f}",
            "thermostat_setpoint_c": "" if miss_setpoint[i] else f"{setpoint[i]:.1f}",
            "has_solar_panels": str(solar[i]),
            TARGET: f"{energy[i]:.2f}",
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
    write_csv(out / "train.csv", ["id", *FEATURES, TARGET], train)
    write_csv(out / "test.csv", ["id", *FEATURES], test)
    write_csv(out / "answer.csv", ["id", TARGET], test)
    if args.out is None:
        mean = sum(float(row[TARGET]) for row in train) / len(train)
        sample = [{"id": row["id"], TARGET: f"{mean:.2f}"} for row in test]
        write_csv(TASK_DIR / "sample_submission.csv", ["id", TARGET], sample)


if __name__ == "__main__":
    main()
