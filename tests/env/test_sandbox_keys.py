"""The env's sandbox keys are SandboxConfig's own fields under the env's names: one mapping, one set of
defaults, bounds and checks."""

from __future__ import annotations

import pytest

from air.env.sandbox_keys import sandbox_keys
from air.env.settings import EnvSettingsError, MLGymEnvSettings, parse_env_settings
from air.sandbox.config import SandboxConfig

ENV_DEFAULTS = {"image": None, "run_id": "air"}  # where the env's default is its own


def test_every_sandbox_key_sets_its_field_and_shares_its_default_and_description() -> None:
    keys = sandbox_keys(MLGymEnvSettings)
    assert keys["container_cpus"] == "cpus" and keys["command_timeout"] == "command_timeout_s" and len(keys) == 13
    for key, name in keys.items():
        env, sandbox = MLGymEnvSettings.model_fields[key], SandboxConfig.model_fields[name]
        assert env.default == ENV_DEFAULTS.get(key, sandbox.default), key
        assert env.description == sandbox.description and env.metadata == sandbox.metadata, key


def test_the_sandbox_config_is_built_from_the_keys() -> None:
    settings = parse_env_settings(
        {"container_cpus": 1.5, "container_memory": "2G", "container_disk": "", "env_gpu": 7, "engine_wait": 5}
    )
    config = settings.sandbox_config()
    assert (config.cpus, config.memory, config.disk, config.env_gpu, config.engine_wait_s) == (1.5, "2g", "", "7", 5)
    assert (config.image, config.run_id) == ("", "air")  # no image: $AIR_IMAGE, else the recipe's tag
    assert parse_env_settings({"image": "x:1"}).sandbox_config().image == "x:1"


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ({"container_tmp": ""}, "container_tmp: container_tmp must be a whole size like '512m' or '4g', got ''"),
        ({"container_cpus": 0}, "container_cpus: Input should be greater than 0"),
        ({"container_pids": 16}, "container_pids: Input should be greater than 16"),
    ],
)
def test_a_bad_sandbox_key_is_named_by_its_env_name(args: dict, said: str) -> None:
    with pytest.raises(EnvSettingsError) as caught:
        parse_env_settings(args)
    assert str(caught.value) == f"air_mlgym: invalid environment arguments: {said}"
