"""The checkouts a user may point the opt-in tests at, read once before conftest clears the user's
variables (so nothing else in a test sees them): MLGym from $AIR_TEST_MLGYM_ROOT, else $MLGYM_ROOT."""

from __future__ import annotations

import os
from pathlib import Path

MLGYM_CHECKOUT = os.environ.get("AIR_TEST_MLGYM_ROOT") or os.environ.get("MLGYM_ROOT") or ""


def mlgym_checkout() -> Path | None:
    """The MLGym checkout the opt-in tests use, or None (they skip)."""
    root = Path(MLGYM_CHECKOUT).expanduser() if MLGYM_CHECKOUT else None
    return root if root is not None and (root / "configs" / "tasks").is_dir() else None
