"""The checkouts a user may point the opt-in tests at, read once before conftest clears the user's
variables (so nothing else in a test sees them): MLGym from $AIR_TEST_MLGYM_ROOT, else $MLGYM_ROOT;
prime-rl (installed by install_prime_rl.sh, e.g. --orchestrator-only) from $AIR_TEST_PRIME_RL_DIR, else
$PRIME_RL_DIR."""

from __future__ import annotations

import os
from pathlib import Path

from air.launch.prime_rl import cpu_venv

MLGYM_CHECKOUT = os.environ.get("AIR_TEST_MLGYM_ROOT") or os.environ.get("MLGYM_ROOT") or ""
PRIME_RL_CHECKOUT = os.environ.get("AIR_TEST_PRIME_RL_DIR") or os.environ.get("PRIME_RL_DIR") or ""
# Today's prime-rl (v1), installed by `install_prime_rl.sh --orchestrator-only --commit 559b447 DIR`.
PRIME_RL_V1_CHECKOUT = os.environ.get("AIR_TEST_PRIME_RL_V1_DIR") or ""
# Both pins installed with `install_prime_rl.sh --cpu` (vLLM's CPU build): prime-rl's own `rl` end to end
# (tests/rehearsal/test_rl_cpu_e2e.py). CI sets these and the two above to the same two installs.
PRIME_RL_CPU_CHECKOUT = os.environ.get("AIR_TEST_PRIME_RL_CPU_DIR") or ""
PRIME_RL_V1_CPU_CHECKOUT = os.environ.get("AIR_TEST_PRIME_RL_V1_CPU_DIR") or ""
# The rehearsals with SmolLM2 and prime-rl's trainer (5-10 minutes a pin here): asked for by name, CI leaves them.
SMOLLM2_REHEARSALS = bool(os.environ.get("AIR_TEST_SMOLLM2_REHEARSALS"))


def mlgym_checkout() -> Path | None:
    """The MLGym checkout the opt-in tests use, or None (they skip)."""
    root = Path(MLGYM_CHECKOUT).expanduser() if MLGYM_CHECKOUT else None
    return root if root is not None and (root / "configs" / "tasks").is_dir() else None


def prime_rl_checkout() -> Path | None:
    """The prime-rl checkout the opt-in rehearsal tests use, or None (they skip)."""
    root = Path(PRIME_RL_CHECKOUT).expanduser() if PRIME_RL_CHECKOUT else None
    return root if root is not None and (root / "src" / "prime_rl").is_dir() else None


def prime_rl_v1_checkout() -> Path | None:
    """Today's prime-rl checkout (env servers) with its orchestrator venv, or None (the tests skip)."""
    root = Path(PRIME_RL_V1_CHECKOUT).expanduser() if PRIME_RL_V1_CHECKOUT else None
    if root is None or not (root / "src" / "prime_rl" / "entrypoints" / "env_server.py").is_file():
        return None
    return root if (cpu_venv(root) / "bin" / "python").is_file() else None


def prime_rl_cpu_checkout(generation: str) -> Path | None:
    """A checkout installed with ``--cpu`` for ``generation`` ("classic" or "v1"), or None."""
    text = PRIME_RL_CPU_CHECKOUT if generation == "classic" else PRIME_RL_V1_CPU_CHECKOUT
    root = Path(text).expanduser() if text else None
    return root if root is not None and (root / "src" / "prime_rl").is_dir() else None
