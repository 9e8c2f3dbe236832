"""Evaluate the Lane Merge strategy in strategy.py.

Plays many seeded 10-round matches of the row strategy in strategy.py against
the column strategy in target.py and prints one JSON object with the mean
payoff per round, e.g. Score: 2.1345.

The other driver's dice: when the evaluation is given a seed (the environment
variable AIR_EVAL_SEED, which the training environment sets and keeps from the
strategy), every match draws from a seed derived from it, so its draws cannot be
predicted from this file; the same seed gives the same score. Run by hand
without one, the matches are seeded from BASE_SEED (the task's recorded
baseline score is the starter strategy's score under them).
"""

import contextlib
import importlib.util
import json
import os
import random
import sys
import traceback
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
NUM_MATCHES = 2000
ROUNDS_PER_MATCH = 10
BASE_SEED = 20240611  # the matches of a run by hand, and the seeds the strategy's own generators get
YIELD, GO = 0, 1
# Payoff to the row player for (row move, column move).
ROW_PAYOFF = {(YIELD, YIELD): 3, (YIELD, GO): 1, (GO, YIELD): 5, (GO, GO): 0}


def fail(message):
    print(f"Evaluation error: {message}", file=sys.stderr)
    sys.exit(1)


def load_module(name, filename, secret=False):
    path = HERE / filename
    if not path.is_file():
        if secret:
            fail(f"{filename} was not found next to evaluate.py; it is a hidden file that is only "
                 "present while the task is being evaluated.")
        fail(f"{filename} was not found in {HERE}.")
    if str(HERE) not in sys.path:
        sys.path.append(str(HERE))
    sys.modules.pop(name, None)
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        with contextlib.redirect_stdout(sys.stderr):
            spec.loader.exec_module(module)
    except Exception:
        traceback.print_exc(file=sys.stderr)
        fail(f"importing {filename} raised an exception (traceback above).")
    return module


def get_function(module, filename, name):
    func = getattr(module, name, None)
    if not callable(func):
        fail(f"{filename} must define a function named {name}(history).")
    return func


def check_move(move, who):
    # Accept ints (and numpy integers / bools) equal to 0 or 1.
    try:
        value = int(move)
        ok = value == move and value in (YIELD, GO)
    except (TypeError, ValueError):
        ok = False
    if not ok:
        fail(f"{who} returned {move!r}; a move must be 0 (YIELD) or 1 (GO).")
    return value


def evaluation_seed():
    """The evaluation's seed (AIR_EVAL_SEED), or None when run by hand without one."""
    seed = os.environ.get("AIR_EVAL_SEED", "")
    return int(seed) if seed.isdigit() else None


def opponent_seed(seed, match_index):
    """The seed of the other driver's dice in match ``match_index``, under evaluation seed ``seed``."""
    if seed is None:
        return (BASE_SEED + match_index) * 7919 + 17
    return seed * NUM_MATCHES + match_index


def play_match(row_strategy, column_strategy, match_index, seed=None):
    # Seed the global generators so that a strategy that uses `random` or
    # `numpy.random` gets the same draws on every evaluation. These seeds are
    # public (they reach the strategy): the other driver's dice are not drawn
    # from them.
    own_seed = BASE_SEED + match_index
    random.seed(own_seed)
    np.random.seed(own_seed % (2**32))
    column_rng = random.Random(opponent_seed(seed, match_index))
    row_history = []  # (row move, column move)
    column_history = []  # (column move, row move)
    total = 0
    for _ in range(ROUNDS_PER_MATCH):
        try:
            row_move = row_strategy(list(row_history))
        except Exception:
            traceback.print_exc(file=sys.stderr)
            fail("row_strategy raised an exception (traceback above).")
        row_move = check_move(row_move, "row_strategy")
        column_move = check_move(column_strategy(list(column_history), column_rng), "column_strategy")
        total += ROW_PAYOFF[(row_move, column_move)]
        row_history.append((row_move, column_move))
        column_history.append((column_move, row_move))
    return total


def main():
    strategy = load_module("strategy", "strategy.py")
    target = load_module("target", "target.py", secret=True)
    row_strategy = get_function(strategy, "strategy.py", "row_strategy")
    column_strategy = get_function(target, "target.py", "column_strategy")
    seed = evaluation_seed()
    total = 0
    # Anything the strategy prints goes to stderr so stdout holds only the metrics.
    with contextlib.redirect_stdout(sys.stderr):
        for match_index in range(NUM_MATCHES):
            total += play_match(row_strategy, column_strategy, match_index, seed)
    score = total / (NUM_MATCHES * ROUNDS_PER_MATCH)
    print(json.dumps({"Score": round(score, 4)}))


if __name__ == "__main__":
    main()
