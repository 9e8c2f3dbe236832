"""An env loaded by id the way prime-rl's orchestrator and vf-eval load it (``vf.load_environment``).

Beside ``mlgym_env``, the only module outside the top-level env modules that imports verifiers: the
runners and the preflight load envs through here, so no other layer depends on verifiers' API.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import verifiers as vf

from air.env.generations import classic_only

# Where verifiers logs a failed load (with the whole argument dict) before raising it again.
_VF_LOADER_LOG = "verifiers.utils.env_utils"


class EnvLoadError(ValueError):
    """An env did not load; the message is the env's own error, said once."""


def load_env(env_id: str, **args: Any) -> vf.Environment:
    """``vf.load_environment``, whose failure is one :class:`EnvLoadError` (the cause kept on the chain),
    not verifiers' logged line with every argument followed by its wrapped copy of the same message."""
    if not hasattr(vf, "load_environment"):  # verifiers 0.3+: v1 only, its envs run in env servers
        raise EnvLoadError(classic_only(f"loading env {env_id!r} with vf.load_environment"))
    try:
        with _errors_unlogged(logging.getLogger(_VF_LOADER_LOG)):
            return vf.load_environment(env_id, **args)
    except (ValueError, RuntimeError) as exc:
        cause = exc.__cause__
        if isinstance(cause, ImportError):
            message = f"env {env_id!r} cannot be imported: {cause} (is its package installed in this environment?)"
        else:
            message = str(cause) if cause is not None and str(cause).strip() else str(exc)
        raise EnvLoadError(message) from (cause or exc)


@contextlib.contextmanager
def _errors_unlogged(logger: logging.Logger) -> Iterator[None]:
    def below_error(record: logging.LogRecord) -> bool:
        return record.levelno < logging.ERROR

    logger.addFilter(below_error)
    try:
        yield
    finally:
        logger.removeFilter(below_error)


def count_env_rows(env_id: str, args: dict[str, Any]) -> tuple[int, str]:
    """Load an env as the installed prime-rl would and count its rows: the classic
    ``vf.load_environment`` where verifiers has it, else the v1 taskset (verifiers 0.4.0 has only v1)."""
    if hasattr(vf, "load_environment"):
        return len(load_env(env_id, **args).get_dataset()), f"vf.load_environment({env_id!r}, ...)"
    from verifiers.v1.utils import loaders

    config = loaders.taskset_config_type(env_id)(id=env_id, **args)
    return len(list(loaders.load_taskset(config))), f"verifiers.v1 load_taskset({env_id!r})"
