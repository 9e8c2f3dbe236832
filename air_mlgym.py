"""The env prime-rl loads as ``air_mlgym``, for either generation of verifiers.

- Classic (verifiers 0.1.x, prime-rl c87c19b, classic vf-eval): ``load_environment(**args) -> MLGymEnv``,
  a ``vf.MultiTurnEnv``. Imported on call, so a v1-only verifiers never touches it.
- v1 (verifiers 0.4.0, prime-rl main's env servers, today's vf-eval): the module's ``__all__`` names the
  ``vf.Taskset`` (``MLGymTaskset``), the ``vf.Env`` (``MLGymV1Env``) and the ``vf.Harness``
  (``MLGymPlayer``, harness id ``air_mlgym``: the in-process player) that verifiers' plugin loader
  picks; present only where ``verifiers.v1`` imports.

Loading only reads task configs; containers start with the first rollout. The arguments are
``air.env.settings.MLGymEnvSettings`` (the v1 taskset config has the same fields); an unknown or
mistyped one fails at load, naming the key.
"""

from __future__ import annotations

from typing import Any

from air.env.settings import parse_env_settings

__all__ = ["load_environment"]

try:
    import verifiers.v1  # noqa: F401  (absent before verifiers 0.3)
except ImportError:
    pass
else:
    from air.env.v1_player import MLGymPlayer

    __all__ += ["MLGymPlayer", "MLGymTaskset", "MLGymV1Env"]  # noqa: F822 (the last two: __getattr__)


def __getattr__(name: str) -> Any:
    """The v1 taskset and env, imported on first use: ``air.env.v1_front`` resolves its seat's harness
    (``air_mlgym``, this module) while it is being defined, so this module must not import it first."""
    if name in ("MLGymTaskset", "MLGymV1Env") and name in __all__:
        from air.env import v1_front

        return getattr(v1_front, name)
    raise AttributeError(f"module 'air_mlgym' has no attribute {name!r}")


def load_environment(**kwargs: Any):
    """The classic env (``vf.MultiTurnEnv``); needs a verifiers with the classic API (0.1.x)."""
    try:
        from air.env.mlgym_env import MLGymEnv
    except (ImportError, AttributeError) as exc:
        raise ImportError(
            f"air_mlgym.load_environment is the classic front and needs verifiers 0.1.x ({exc}); with "
            "verifiers v1 (0.4.0), load the taskset 'air_mlgym' instead (see the README, Today's prime-rl)"
        ) from exc
    return MLGymEnv(parse_env_settings(kwargs))
