"""The arguments of ``simple_env.load_environment`` (the dial game), apart from the env itself: the
command line checks them before it imports verifiers, and ``air check`` without building the env."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from air.env.rewards import RewardSettings


class SimpleEnvSettings(BaseModel):
    """The arguments of ``load_environment`` (the env's ``args`` table in a prime-rl TOML)."""

    model_config = ConfigDict(extra="forbid")

    num_examples: int = Field(default=8, ge=1, description="Rows in the dataset, one hidden target each.")
    max_turns: int = Field(default=10, ge=1, description="Model replies per rollout.")
    seed: int = Field(default=0, description="With the example id, fixes each example's target.")
    reward: RewardSettings = Field(default_factory=RewardSettings, description="How scores become reward.")
    max_consecutive_format_errors: int = Field(
        default=3, ge=0, description="End the rollout after this many malformed replies in a row (0: never)."
    )
