"""The evaluator process's entry (runs as the unprivileged evaluator user; stdlib only).

    python -I -B eval_bootstrap.py MODE SCRIPT [ARGS...]

Runs the task's pristine evaluation script from the private copy as ``__main__``. The standard library
and site-packages come first on sys.path (-I), then our proxy library, then the private copy (the
script's folder: secrets and, for Python-entrypoint tasks, the proxies of the agent's modules). Only
Model-entrypoint tasks also see the workspace, because MLGym's evaluators import the agent's model code.
"""

import runpy
import sys
from pathlib import Path

WORKSPACE = "/home/agent/workspace"


def main() -> None:
    mode, script, *args = sys.argv[1:]
    sys.path.append(str(Path(__file__).resolve().parent))
    sys.path.append(str(Path(script).parent))
    if mode == "model":
        sys.path.append(WORKSPACE)
    sys.argv = [script, *args]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
