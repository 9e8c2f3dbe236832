"""The other driver in the Lane Merge game (the COLUMN player).

This file is hidden from the agent during the episode; it is only present
while the evaluation runs.
"""

YIELD = 0
GO = 1


def column_strategy(history, rng):
    """Return the column player's next move.

    Args:
        history: list of (my_move, their_move) tuples from the column player's
            point of view, i.e. (column move, row move), oldest first.
        rng: a `random.Random` instance owned by the evaluator.
    """
    if not history:
        p_go = 0.5
    else:
        my_last, their_last = history[-1]
        their_recent = [their for _mine, their in history[-3:]]
        if len(history) >= 3 and all(move == GO for move in their_recent):
            # Three pushy rounds in a row: hold a grudge and refuse to give way.
            p_go = 0.85
        elif my_last == GO and their_last == GO:
            # Just scraped each other: shaken, usually backs off.
            p_go = 0.2
        elif their_last == YIELD:
            # The other side gave way last time: push your luck.
            p_go = 0.75
        else:
            # Gave way while they went: mostly keeps giving way.
            p_go = 0.35
    return GO if rng.random() < p_go else YIELD
