"""The env prime-rl loads as env_id ``air_mlgym``: ``load_environment(**args) -> MLGymEnv``.

Loading only reads task configs and builds the dataset; containers start with the first rollout
(prime-rl calls this in its orchestrator and again in every env worker). The arguments are
``air.env_settings.MLGymEnvSettings``; an unknown or mistyped one fails here, naming the key.
"""

from __future__ import annotations

from typing import Any

from air.env.mlgym_env import MLGymEnv
from air.env.settings import parse_env_settings


def load_environment(**kwargs: Any) -> MLGymEnv:
    return MLGymEnv(parse_env_settings(kwargs))
