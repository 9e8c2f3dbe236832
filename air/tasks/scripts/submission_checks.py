"""Checks of a submission that some evaluators lack (runs as root in the sandbox; stdlib only).

MLGym's titanic merges the submission with the answers on PassengerId: a submission that repeats the
ids it is sure of (and drops the others) scores above its true accuracy. The runner checks the
evaluator's private copy of the submission before the evaluator sees it; the column comes from the
task (``submission_id_column``, or the table in ``air/tasks/config.py``).
"""

from __future__ import annotations

import csv
from pathlib import Path


def repeated_id(path: Path, column: str) -> str | None:
    """Why the CSV at ``path`` is refused (an id given more than one row), or None. A file without the
    column or unreadable as CSV is left to the evaluator, which says what it expects."""
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            reader = csv.reader(f)
            header = [name.strip() for name in next(reader, [])]
            if column not in header:
                return None
            at = header.index(column)
            seen: set[str] = set()
            for row in reader:
                if at < len(row):
                    value = row[at].strip()
                    if value in seen:
                        return f"submission.csv gives {column} {value} more than one row: each id must appear once."
                    seen.add(value)
    except (csv.Error, OSError):
        return None
    return None
