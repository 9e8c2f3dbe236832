"""An env that does not load fails once, with its own message: not verifiers' logged line with the whole
argument dict followed by its wrapped copy of the same message."""

from __future__ import annotations

import logging

import pytest

from air.env.load import EnvLoadError, load_env


def test_a_load_error_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    with pytest.raises(EnvLoadError) as raised:
        load_env("air_mlgym", task_configs=["noSuchTask"], pool_size=0)
    message = str(raised.value)
    assert message.startswith("Unknown task 'noSuchTask'") and "Failed to load" not in message
    assert "\n" not in message
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def test_an_env_that_cannot_be_imported_is_named() -> None:
    with pytest.raises(EnvLoadError, match="'no_such_env_here' cannot be imported"):
        load_env("no_such_env_here")
