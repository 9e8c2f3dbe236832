"""What each fault of the fleet costs, measured by the tests that prove it: ``python benchmarks/fleet_faults.py
[--rounds 3] [--json]`` runs each fault's test ``--rounds`` times with ``pytest -s`` and gathers the
``FAULT-FIGURES`` line each prints: episodes in flight, episodes lost, seconds from the fault to the last
of them answered, and what else the fault's test measured (episodes sent to a node after its engine died,
seconds until the containers beyond the warm pool are gone, seconds until the nodes cancel abandoned runs).

The stub faults (tests/fleet/test_spreader_death.py) run in the README's environment; the real ones
(tests/v1/test_v1_fleet_faults.py: laneMerge in containers, a second Docker engine) in ``.venv-v1`` and need
root and dockerd. The tests' settings: --lost-after 2 --probe-interval 0.25 (stub), 4 and 0.5 (real).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CLASSIC = ["uv", "run", "--group", "dev", "--extra", "tiny"]
V1 = ["uv", "run", "--no-group", "classic", "--group", "dev", "--group", "v1", "--extra", "tiny"]
RUNS = (
    (CLASSIC, {}, "tests/fleet/test_spreader_death.py"),
    (V1, {"UV_PROJECT_ENVIRONMENT": ".venv-v1"}, "tests/v1/test_v1_fleet_faults.py"),
)


def run_once(prefix: list[str], env: dict[str, str], target: str) -> list[dict]:
    command = [*prefix, "pytest", "-p", "no:cacheprovider", "-q", "-s", target]
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, **env}, capture_output=True, text=True)
    marker = "FAULT-FIGURES "  # pytest's progress dots may come first on the line
    lines = [line.split(marker, 1)[1] for line in done.stdout.splitlines() if marker in line]
    if done.returncode != 0:
        print(done.stdout[-3000:], file=sys.stderr)
        raise SystemExit(f"{target} failed (exit {done.returncode}): the figures of a failed run are not figures")
    return [json.loads(line) for line in lines]


def summary(rounds: list[dict]) -> dict:
    """Per field: the values of every round, and their median where they are numbers."""
    fields: dict[str, list] = defaultdict(list)
    for figures in rounds:
        for key, value in figures.items():
            if key != "fault":
                fields[key].append(max(value) if isinstance(value, list) and value else value)
    out = {}
    for key, values in fields.items():
        numbers = [value for value in values if isinstance(value, int | float)]
        out[key] = {"rounds": values, "median": statistics.median(numbers)} if numbers else {"rounds": values}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", choices=("stub", "real"), help="one tier only")
    parser.add_argument("--json", action="store_true", help="one JSON object, no table")
    args = parser.parse_args()
    runs = [run for run in RUNS if args.only is None or ("v1" in run[2]) == (args.only == "real")]
    by_fault: dict[str, list[dict]] = defaultdict(list)
    for index in range(args.rounds):
        for prefix, env, target in runs:
            for figures in run_once(prefix, env, target):
                by_fault[figures["fault"]].append(figures)
            print(f"round {index + 1}/{args.rounds}: {target} done", file=sys.stderr)
    result = {fault: summary(rounds) for fault, rounds in by_fault.items()}
    if args.json:
        print(json.dumps(result))
        return
    for fault, fields in result.items():
        print(f"{fault}:")
        for key, value in fields.items():
            median = f" (median {value['median']:g})" if "median" in value else ""
            print(f"  {key}: {value['rounds']}{median}")


if __name__ == "__main__":
    main()
