"""Command-line options declared once, by the fields of a settings model (pydantic).

A field ``batch_size`` becomes ``--batch-size`` (dest ``batch_size``), its type, default and description
becoming the option's type, default and help; Optional, list (one option per item), bool (a switch) and
Literal (choices) included. What a field needs beyond that goes in its ``json_schema_extra``:

- ``flag``: the option's spelling where it is not the field's name (``--task`` for ``tasks``);
- ``metavar``: what --help shows for its value;
- ``repeat``: True for a field given as one option per item (``--env-arg K=V`` for a dict);
- ``cli``: False for a field that is no option of the command (set by code or tests only).

:func:`settings_from_args` builds the model from the parsed namespace; a refusal is one line naming the
options at fault (``--batch-size (6) must be divisible by --rollouts-per-example (4)``).
"""

from __future__ import annotations

import argparse
import re
import types
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from air.cli.errors import CommandError

M = TypeVar("M", bound=BaseModel)
_SCALARS = (int, float, str, Path)


def _extra(info: FieldInfo) -> dict[str, Any]:
    return info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}


def option_fields(model: type[BaseModel], only: Iterable[str] | None = None) -> dict[str, FieldInfo]:
    """The model's fields that are options of its command, in declaration order (or ``only``'s)."""
    fields = model.model_fields
    names = list(only) if only is not None else [n for n, info in fields.items() if _extra(info).get("cli", True)]
    return {name: fields[name] for name in names}


def flag_of(model: type[BaseModel], name: str) -> str:
    """The option that sets field ``name``: its ``flag``, else ``--`` and the name with dashes."""
    return _extra(model.model_fields[name]).get("flag") or "--" + name.replace("_", "-")


def default_of(info: FieldInfo) -> Any:
    """The field's default (its factory called), or PydanticUndefined for a required field."""
    return info.get_default(call_default_factory=True)


def _strip_optional(annotation: Any) -> Any:
    if get_origin(annotation) in (Union, types.UnionType):
        args = [a for a in get_args(annotation) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return annotation


def _option_kwargs(name: str, info: FieldInfo) -> dict[str, Any]:
    extra = _extra(info)
    kind = _strip_optional(info.annotation)
    default = default_of(info)
    kwargs: dict[str, Any] = {"dest": name, "help": info.description or ""}
    if "metavar" in extra:
        kwargs["metavar"] = extra["metavar"]
    if default is PydanticUndefined:
        kwargs["required"] = True
        default = None
    if extra.get("repeat") or get_origin(kind) is list:
        item = get_args(kind)[0] if get_origin(kind) is list else str
        # None, not []: an option never given leaves the field to its own default (see settings_from_args)
        return kwargs | {"action": "append", "type": item if item in _SCALARS else str, "default": None}
    if kind is bool:
        action = argparse.BooleanOptionalAction if default else "store_true"
        return kwargs | {"action": action, "default": default}
    if get_origin(kind) is Literal:
        choices = list(get_args(kind))
        return kwargs | {"choices": choices, "type": type(choices[0]), "default": default}
    if get_origin(kind) in (Union, types.UnionType):  # e.g. float | Literal["auto"]: pydantic reads the text
        return kwargs | {"type": str, "default": default}
    if kind not in _SCALARS:
        raise TypeError(f"{name}: no command-line form for {kind!r}; give it json_schema_extra cli=False")
    return kwargs | {"type": kind, "default": default}


def add_model_options(
    parser: argparse.ArgumentParser,
    model: type[BaseModel],
    *,
    only: Iterable[str] | None = None,
    unset: str | None = None,
) -> None:
    """An option per field of ``model`` (or of ``only``). With ``unset`` ("the spreader's own"), each option's
    default is None (not given: the model's own applies where the settings are built) and its help says
    ``(default: <unset>, <the model's default>)``."""
    for name, info in option_fields(model, only).items():
        kwargs = _option_kwargs(name, info)
        flag = flag_of(model, name)
        if kwargs.get("action") in (None, "append") and "choices" not in kwargs:  # a value: named as its flag
            kwargs.setdefault("metavar", flag.lstrip("-").replace("-", "_").upper())
        if unset is not None:
            kwargs["help"] = f"{kwargs['help']} (default: {unset}, {default_of(info)})"
            kwargs["default"] = None
        parser.add_argument(flag, **kwargs)


def settings_from_args(
    model: type[M],
    args: argparse.Namespace,
    *,
    only: Iterable[str] | None = None,
    extra: Mapping[str, Any] | None = None,
    command: str | None = None,
) -> M:
    """``model`` from the options :func:`add_model_options` added (an option left out leaves its field's own
    default) and ``extra``; a refusal is a CommandError, one line naming the options (after ``command``)."""
    values: dict[str, Any] = {}
    for name, info in option_fields(model, only).items():
        value = getattr(args, name, None)
        if value is None and default_of(info) is not None:
            continue  # not given: the model's default, whatever the parser's was
        values[name] = value
    values.update(extra or {})
    try:
        return model(**values)
    except ValidationError as exc:
        line = "; ".join(_problem(model, error) for error in exc.errors())
        raise CommandError(f"{command}: {line}" if command else line) from None


_BOUNDS = {"greater_than_equal": "at least", "greater_than": "more than", "less_than_equal": "at most"}


def _problem(model: type[BaseModel], error: Any) -> str:
    """One pydantic error as the option it came from: '--steps must be at least 1', '--task: ...'."""
    message = _as_flags(model, str(error["msg"]).removeprefix("Value error, "))
    loc = error["loc"]
    if not loc or loc[0] not in model.model_fields:
        return message  # a check across fields: its message names them
    flag = flag_of(model, str(loc[0]))
    bound = _BOUNDS.get(error["type"])
    if bound is not None and len(loc) == 1:
        limit = next(iter(error["ctx"].values()))
        return f"{flag} must be {bound} {limit}"
    return f"{flag}: {message}"


def _as_flags(model: type[BaseModel], message: str) -> str:
    """Field names in a model's own message (``batch_size``) as the options that set them (``--batch-size``);
    only names with an underscore, which are no English word."""
    for name in option_fields(model):
        if "_" in name:
            message = re.sub(rf"(?<![\w-]){name}(?!\w)", flag_of(model, name), message)
    return message
