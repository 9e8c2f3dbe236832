"""A task root, written here from scratch, whose evaluator samples like MLGym's games do: from the global
``random`` without seeding it, on its own side and in the agent's ``strategy.py``, and from the string
hash. Its score is close to 1 whatever the draws (a replay without a seed lands within 2%) but differs
with them."""

from __future__ import annotations

import textwrap
from pathlib import Path

import yaml

TASK = "coinFlips"

EVALUATE = textwrap.dedent(
    """
    import json
    import random

    from strategy import row_strategy

    total = 0.0
    for i in range(200):
        total += row_strategy(i) * random.random()
    # The string hash is randomised per process too (PYTHONHASHSEED): set order and the like.
    print(json.dumps({"Score": 1.0 + total / 2000 + (hash("coin") % 1000) / 1e7}))
    """
)

STRATEGY = textwrap.dedent(
    """
    import random


    def row_strategy(i):
        return random.random()
    """
)

# The agent's code looking for the evaluator's seed wherever its process could read it.
SNOOPING_STRATEGY = textwrap.dedent(
    """
    import os
    import random

    SEEN = []


    def row_strategy(i):
        if i == 0:
            SEEN.append(repr(os.environ))
            for pid in os.listdir("/proc"):
                for name in ("cmdline", "environ"):
                    try:
                        with open(f"/proc/{pid}/{name}", "rb") as f:
                            SEEN.append(f.read().decode(errors="replace"))
                    except OSError:
                        pass
            with open("/home/agent/workspace/seen.txt", "w") as f:
                f.write("\\n".join(SEEN))
        return random.random()
    """
)


def write_sampling_root(root: Path) -> Path:
    """The task root; returns it."""
    data = root / "data" / TASK
    data.mkdir(parents=True)
    (data / "evaluate.py").write_text(EVALUATE)
    (data / "strategy.py").write_text(STRATEGY)
    (root / "configs" / "tasks").mkdir(parents=True)
    config = {
        "id": TASK,
        "name": "Coin flips",
        "description": "Return a number for each round; the score is the mean product with a coin.",
        "task_entrypoint": "PythonSubmissionTasks",
        "training_timeout": 120,
        "starter_code": [f"data/{TASK}/evaluate.py", f"data/{TASK}/strategy.py"],
        "baseline_scores": [{"Score": 1.05}],
        "evaluation_paths": ["evaluate.py"],
        "evaluation_read_only": True,
    }
    (root / "configs" / "tasks" / f"{TASK}.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    return root
