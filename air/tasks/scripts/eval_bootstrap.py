"""The evaluator process's entry (runs as the unprivileged evaluator user; stdlib only).

    python -I -B eval_bootstrap.py MODE SCRIPT [ARGS...]

Runs the task's pristine evaluation script from the private copy as ``__main__``. The standard library
and site-packages come first on sys.path (-I), then our proxy library, then the private copy (the
script's folder: secrets and, for Python-entrypoint tasks, the proxies of the agent's modules). Only
Model-entrypoint tasks also import from the workspace, because MLGym's evaluators import the agent's
model code: only the modules the task itself names as the agent's (``AIR_AGENT_MODULES``, e.g. ``src``,
``baseline``), so a library the image lacks cannot be supplied by the agent (a planted ``gymnax/``).

With an evaluation seed (``AIR_EVAL_SEED``, set by eval_runner.py) the global generators an evaluator
may draw from unseeded (``random``, ``numpy.random``) and the string hash are seeded first, so the
same submission scores the same under the same seed. A script that seeds them itself still wins; one
that draws its own seeds from the evaluation's (laneMerge's opponent) reads ``AIR_EVAL_SEED`` itself. It
stays in the environment except in ``model`` mode, where the agent's code runs in this process.
"""

import os
import runpy
import sys
from pathlib import Path

WORKSPACE = "/home/agent/workspace"
HERE = str(Path(__file__).resolve().parent)


def _hash_seeded(seed: str) -> None:
    """-I ignores PYTHONHASHSEED: start once more without it, keeping what -I gave. The environment is
    eval_runner's own (no PYTHONPATH or the like to ignore); -s leaves the user's site out; the script's
    folder, which a plain start puts first on sys.path, is moved to the end in main()."""
    if not sys.flags.isolated:
        return
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
    hash_seed = str(int(seed) % 2**32)  # Python takes 32 bits at most
    env.update(PYTHONHASHSEED=hash_seed, PYTHONDONTWRITEBYTECODE="1", AIR_EVAL_SEED=seed)
    os.execve(sys.executable, [sys.executable, "-s", "-B", __file__, *sys.argv[1:]], env)


def seed_globals(seed: int) -> None:
    import random

    random.seed(seed)
    try:
        import numpy
    except ImportError:
        return
    numpy.random.seed(seed % 2**32)


class _AgentModules:
    """Finds the agent's named top-level modules in the workspace (their submodules follow the package's
    own path), and nothing else there."""

    def __init__(self, allowed: set[str]) -> None:
        self.allowed = allowed

    def find_spec(self, name, path=None, target=None):
        if path is not None or name not in self.allowed:
            return None
        from importlib.machinery import PathFinder

        return PathFinder.find_spec(name, [WORKSPACE])


def main() -> None:
    mode, script, *args = sys.argv[1:]
    seed = os.environ.get("AIR_EVAL_SEED", "")
    if seed.isdigit():
        _hash_seeded(seed)
        if mode == "model":
            del os.environ["AIR_EVAL_SEED"]
        seed_globals(int(seed))
    if sys.path and sys.path[0] == HERE:
        sys.path.pop(0)
    sys.path.append(HERE)
    sys.path.append(str(Path(script).parent))
    if mode == "model":
        allowed = set(filter(None, os.environ.pop("AIR_AGENT_MODULES", "").split(",")))
        sys.meta_path.append(_AgentModules(allowed))
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
