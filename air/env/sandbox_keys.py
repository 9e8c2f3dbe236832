"""The one seam between the env's arguments and the sandbox's settings.

An env argument that sets a :class:`SandboxConfig` field is declared with :func:`sandbox_key`: the field's
default, bounds, checks (a size's, naming the env's key) and description are the sandbox's own, and the
env field remembers which sandbox field it sets. :func:`sandbox_config` builds the container settings from
those marks, so adding a sandbox knob to the env is one line in ``MLGymEnvSettings``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field
from pydantic_core import PydanticUndefined

from air.sandbox.config import SandboxConfig, memory_budget_problem

_MARK = "sandbox_field"  # in the env field's json_schema_extra: the SandboxConfig field it sets


def sandbox_key(name: str, *, default: Any = PydanticUndefined) -> Any:
    """An env argument that sets ``SandboxConfig.<name>``; ``default`` where the env's differs from the
    sandbox's (``None`` reads as the sandbox's own default when the config is built)."""
    source = SandboxConfig.model_fields[name]
    field = Field(
        default=source.default if default is PydanticUndefined else default,
        description=source.description,
        json_schema_extra={_MARK: name},
    )
    field.metadata = list(source.metadata)  # bounds (gt=0) and checks (a size's), as the sandbox declares them
    return field


def sandbox_keys(model: type[BaseModel]) -> dict[str, str]:
    """``model``'s env key -> SandboxConfig field, for every argument declared with :func:`sandbox_key`."""
    keys = {}
    for key, info in model.model_fields.items():
        extra = info.json_schema_extra
        if isinstance(extra, dict) and _MARK in extra:
            keys[key] = str(extra[_MARK])
    return keys


def sandbox_config(settings: BaseModel) -> SandboxConfig:
    """The container settings that ``settings``' sandbox keys make; a key left ``None`` keeps the sandbox's
    default (``image``: $AIR_IMAGE, else the recipe's tag)."""
    values = {field: getattr(settings, key) for key, field in sandbox_keys(type(settings)).items()}
    return SandboxConfig(**{field: value for field, value in values.items() if value is not None})


def memory_budget(settings: BaseModel) -> str | None:
    """``memory_budget_problem`` for ``settings``' sandbox keys, naming them as the env does (a key left ``None``
    or absent: the sandbox's default)."""
    by_field = {field: key for key, field in sandbox_keys(type(settings)).items()}
    names, values = [], []
    for field in ("memory", "tmp_size", "shm_size"):
        key = by_field.get(field)
        value = getattr(settings, key) if key else None
        names.append(key or field)
        values.append(SandboxConfig.model_fields[field].default if value is None else value)
    return memory_budget_problem(*values, keys=(names[0], names[1], names[2]))
