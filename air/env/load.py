"""An env loaded by id the way prime-rl's orchestrator and vf-eval load it (``vf.load_environment``).

Beside ``mlgym_env``, the only module outside the top-level env modules that imports verifiers: the
runners and the preflight load envs through here, so no other layer depends on verifiers' API.
"""

from __future__ import annotations

from typing import Any

import verifiers as vf


def load_env(env_id: str, **args: Any) -> vf.Environment:
    return vf.load_environment(env_id, **args)
