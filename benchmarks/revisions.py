"""One benchmark run on two revisions of this project, side by side in one run (alternated round by round, so
both see the same machine).

    uv run python benchmarks/revisions.py BASE [HEAD] [--rounds 2] -- benchmarks/env.py --json [ARGS...]

Each revision is checked out (``git worktree``, detached, removed afterwards) and the benchmark script runs
there with this checkout's environments (``.venv``; a script that picks its own, as ``fronts.py`` does, finds
them through the worktree's ``.venv`` link), with ``PYTHONPATH`` at the worktree so that it and every process
it starts run that revision's code. The script must print one JSON object on its last line (``--json``).
Prints one JSON object: per revision, each figure's median over the rounds and every round's value.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def git(*args: str) -> str:
    return subprocess.run(["git", *args], cwd=ROOT, check=True, capture_output=True, text=True).stdout.strip()


def run_once(tree: Path, script: list[str]) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    python = ROOT / ".venv" / "bin" / "python"
    done = subprocess.run([str(python), *script], cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{script[0]} failed in {tree}:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("base")
    parser.add_argument("head", nargs="?", default="HEAD")
    parser.add_argument("--rounds", type=int, default=2)
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args, script = parser.parse_args(argv[:cut]), argv[cut + 1 :]
    if not script:
        parser.error("name the benchmark after --")
    revisions = {name: git("rev-parse", "--short", name) for name in (args.base, args.head)}
    trees: dict[str, Path] = {}
    with tempfile.TemporaryDirectory(prefix="air-revisions-") as folder:
        try:
            for name, commit in revisions.items():
                tree = Path(folder) / commit
                git("worktree", "add", "--detach", str(tree), commit)
                for venv in (".venv", ".venv-v1"):  # the environments are this checkout's
                    if (ROOT / venv).exists():
                        (tree / venv).symlink_to(ROOT / venv)
                trees[name] = tree
            rounds: dict[str, list[dict]] = {name: [] for name in trees}
            for number in range(args.rounds):
                for name in trees if number % 2 == 0 else reversed(list(trees)):
                    print(f"round {number + 1}: {name} ({revisions[name]})", file=sys.stderr)
                    rounds[name].append(run_once(trees[name], script))
        finally:
            for tree in trees.values():
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, capture_output=True)
    report = {}
    for name, results in rounds.items():
        numeric = {k for result in results for k, v in result.items() if isinstance(v, int | float)}
        report[f"{name} ({revisions[name]})"] = {
            key: {
                "median": statistics.median(r[key] for r in results if key in r),
                "rounds": [r.get(key) for r in results],
            }
            for key in sorted(numeric)
        }
    print(json.dumps({"script": script, "report": report}, indent=1))


if __name__ == "__main__":
    main()
