"""An env loaded by id the way prime-rl's orchestrator and vf-eval load it (``vf.load_environment``).

Beside ``mlgym_env``, the only module outside the top-level env modules that imports verifiers: the
runners and the preflight load envs through here, so no other layer depends on verifiers' API.
"""

from __future__ import annotations

from typing import Any

import verifiers as vf


def load_env(env_id: str, **args: Any) -> vf.Environment:
    return vf.load_environment(env_id, **args)


def count_env_rows(env_id: str, args: dict[str, Any]) -> tuple[int, str]:
    """Load an env as the installed prime-rl would and count its rows: the classic
    ``vf.load_environment`` where verifiers has it, else the v1 taskset (verifiers 0.4.0 has only v1)."""
    if hasattr(vf, "load_environment"):
        return len(load_env(env_id, **args).get_dataset()), f"vf.load_environment({env_id!r}, ...)"
    from verifiers.v1.utils import loaders

    config = loaders.taskset_config_type(env_id)(id=env_id, **args)
    return len(list(loaders.load_taskset(config))), f"verifiers.v1 load_taskset({env_id!r})"
