"""Each option of `air` is declared once: where a command has a settings model, the model's fields are its
options (flag, default and help from the field), and no module of air/cli declares one of those flags by
hand. Checked on the parser `air` builds, on air/cli's source, and by running the commands' refusals."""

from __future__ import annotations

import argparse
import ast
from pathlib import Path
from typing import Literal

import pytest
from pydantic import BaseModel, Field, model_validator

from air.cli.errors import CommandError
from air.cli.main import build_parser, main
from air.fleet.settings import SpreadSettings
from air.fleet.slurm import SlurmJob
from air.rehearsal.settings import RehearsalSettings
from air.runs.standalone_settings import StandaloneSettings

CLI = Path(__file__).resolve().parents[2] / "air" / "cli"
OVERLAY = ("lost_after_s", "probe_interval_s")
# (the command's words, its settings model, the fields that are its options: None for every option field)
COMMANDS = [
    (["standalone"], StandaloneSettings, None),
    (["rehearse"], RehearsalSettings, None),
    (["fleet", "spread"], SpreadSettings, None),
    (["fleet", "overlay"], SpreadSettings, OVERLAY),
    (["fleet", "submit"], SlurmJob, None),
]


def _extra(model: type[BaseModel], name: str) -> dict:
    extra = model.model_fields[name].json_schema_extra
    return extra if isinstance(extra, dict) else {}


def _fields(model: type[BaseModel], only: tuple[str, ...] | None) -> list[str]:
    return list(only) if only else [n for n in model.model_fields if _extra(model, n).get("cli", True)]


def _flag(model: type[BaseModel], name: str) -> str:
    return _extra(model, name).get("flag") or "--" + name.replace("_", "-")


def _subparser(words: list[str]) -> argparse.ArgumentParser:
    parser = build_parser()
    for word in words:
        [action] = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        parser = action.choices[word]
    return parser


@pytest.mark.parametrize(("words", "model", "only"), COMMANDS, ids=[" ".join(c[0]) for c in COMMANDS])
def test_the_options_are_the_models_fields(words: list[str], model: type[BaseModel], only) -> None:
    actions = {a.dest: a for a in _subparser(words)._actions}
    for name in _fields(model, only):
        info = model.model_fields[name]
        assert name in actions, f"air {' '.join(words)}: no option for {model.__name__}.{name}"
        action = actions[name]
        assert action.option_strings == [_flag(model, name)], action.option_strings
        assert (action.help or "").startswith(info.description or "<none>"), f"{name}: help is not the description"
        default = info.get_default(call_default_factory=True)
        if action.default is not None:  # None: left to the model (a repeated option, or the spreader's own)
            assert action.default == default, f"{name}: the parser says {action.default!r}, the model {default!r}"
        elif only is None and not isinstance(action, argparse._AppendAction):
            assert default is None or action.required, f"{name}: the model's default {default!r} is not the option's"


# Where each command's options are declared: (module of air/cli, its register function).
REGISTERS = {
    "standalone": ("runs.py", "register_standalone"),
    "rehearse": ("rehearse.py", "register_rehearse"),
    "fleet spread": ("fleet.py", "register_fleet"),
    "fleet overlay": ("fleet.py", "register_fleet"),
    "fleet submit": ("fleet_submit.py", "register_submit"),
}


def _hand_declared_flags(module: str, function: str) -> dict[str, int]:
    """Every flag ``function`` of air/cli/``module`` passes to add_argument as a string literal: flag -> line."""
    tree = ast.parse((CLI / module).read_text())
    [register] = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and n.name == function]
    found = {}
    for node in ast.walk(register):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    found[arg.value] = node.lineno
    return found


def test_no_flag_of_a_settings_model_is_declared_by_hand() -> None:
    twice = []
    for words, model, only in COMMANDS:
        module, function = REGISTERS[" ".join(words)]
        by_hand = _hand_declared_flags(module, function)
        twice += [
            f"air {' '.join(words)} {_flag(model, name)} ({model.__name__}.{name}): also {module}:{by_hand[flag]}"
            for name in _fields(model, only)
            if (flag := _flag(model, name)) in by_hand
        ]
    assert not twice, "declared twice (the model and by hand):\n" + "\n".join(twice)


def test_argv_to_standalone_settings_and_back_to_its_defaults() -> None:
    from air.cli.options import settings_from_args

    parser = build_parser()
    argv = ["standalone", "--task", "laneMerge", "--task", "rps", "--batch-size", "6", "--rollouts-per-example", "3"]
    argv += ["--env-arg", "num_examples=2", "--env-arg", "note=hi", "--overwrite", "--model-timeout", "30"]
    settings = settings_from_args(StandaloneSettings, parser.parse_args(argv))
    assert settings.tasks == ["laneMerge", "rps"] and (settings.batch_size, settings.rollouts_per_example) == (6, 3)
    assert settings.env_args == {"num_examples": 2, "note": "hi"}
    assert settings.overwrite is True and settings.model_timeout == 30.0
    assert settings_from_args(StandaloneSettings, parser.parse_args(["standalone"])) == StandaloneSettings()


def test_argv_to_rehearsal_settings() -> None:
    from air.cli.options import settings_from_args

    argv = ["rehearse", "--config", "rl.toml", "--timeout", "60", "--model", "tiny"]
    argv += ["--external-env-server", "lane=tcp://10.0.0.2:5000", "--env-nodes", "rps=/shared/fleet", "--trainer"]
    settings = settings_from_args(RehearsalSettings, build_parser().parse_args(argv))
    assert settings.config == Path("rl.toml") and settings.timeout_s == 60.0 and settings.model_dir == Path("tiny")
    assert settings.external_env_servers == {"lane": "tcp://10.0.0.2:5000"}
    assert settings.env_nodes == {"rps": Path("/shared/fleet")} and settings.trainer is True
    assert settings.node_lost_after_s == SpreadSettings().lost_after_s, "the spreader's bound, declared once"


def test_a_refusal_is_one_line_naming_the_options(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["standalone", "--batch-size", "6", "--output-dir", str(tmp_path / "run")]) == 1
    err = capsys.readouterr().err
    assert err == "air: error: --batch-size (6) must be divisible by --rollouts-per-example (4), as in prime-rl\n"
    assert not (tmp_path / "run").exists()
    address = "tcp://127.0.0.1:1"
    assert main(["fleet", "spread", str(tmp_path), "--address", address, "--lost-after", "1.5"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("air: error: air fleet spread: --lost-after (1.5) must be at least twice --probe-interval")
    assert main(["fleet", "overlay", str(tmp_path), "--config", "rl.toml", "--source", "x", "--probe-interval", "9"])
    assert "--lost-after (10.0) must be at least twice --probe-interval (9.0)" in capsys.readouterr().err
    assert main(["fleet", "submit", str(tmp_path), "--nodes", "0", "--dry-run"]) == 1
    assert capsys.readouterr().err == "air: error: air fleet submit: --nodes must be at least 1\n"


class _Toy(BaseModel):
    """Every kind of field the generator turns into an option."""

    name: str = Field(description="a name")
    mode: Literal["fast", "slow"] = Field("fast", description="how")
    cache: bool = Field(True, description="keep a cache")
    dry_run: bool = Field(False, description="only say")
    max_items: int | None = Field(None, ge=1, description="at most")
    tags: list[str] = Field([], description="a tag", json_schema_extra={"flag": "--tag", "metavar": "T"})
    hidden: int = Field(0, description="not an option", json_schema_extra={"cli": False})

    @model_validator(mode="after")
    def _max_items_of_a_dry_run(self) -> _Toy:
        if self.dry_run and self.max_items:
            raise ValueError("max_items means nothing with dry_run")
        return self


def test_each_kind_of_field_becomes_its_option() -> None:
    from air.cli.options import add_model_options, settings_from_args

    parser = argparse.ArgumentParser(prog="toy")
    add_model_options(parser, _Toy)
    assert "--hidden" not in parser.format_help() and "{fast,slow}" in parser.format_help()
    args = parser.parse_args(
        ["--name", "n", "--mode", "slow", "--no-cache", "--tag", "a", "--tag", "b", "--max-items", "3"]
    )
    assert settings_from_args(_Toy, args) == _Toy(name="n", mode="slow", cache=False, max_items=3, tags=["a", "b"])
    assert settings_from_args(_Toy, parser.parse_args(["--name", "n"])) == _Toy(name="n")
    with pytest.raises(SystemExit):
        parser.parse_args(["--mode", "slow"])  # --name is required: the field has no default
    with pytest.raises(CommandError, match="^--max-items must be at least 1$"):
        settings_from_args(_Toy, parser.parse_args(["--name", "n", "--max-items", "0"]))
    with pytest.raises(CommandError, match="^toy: --max-items means nothing with --dry-run$"):
        settings_from_args(_Toy, parser.parse_args(["--name", "n", "--dry-run", "--max-items", "2"]), command="toy")


def _all_parsers(parser: argparse.ArgumentParser, words: tuple[str, ...] = ()):
    yield words, parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _all_parsers(sub, (*words, name))


def test_no_help_line_types_its_default_again() -> None:
    """A help line that writes out its option's default ("(default: 8008)" beside default=8008) is the value
    declared twice: --help says it from the default itself (DefaultsHelpFormatter or %(default)s)."""
    twice = []
    for words, parser in _all_parsers(build_parser()):
        for action in parser._actions:
            if action.default in (None, False, True, "", [], argparse.SUPPRESS) or not action.option_strings:
                continue
            written = {str(action.default)}
            if isinstance(action.default, float):
                written.add(f"{action.default:g}")
            if any(f"default: {value}" in (action.help or "") for value in written):
                twice.append(f"air {' '.join(words)} {action.option_strings[0]}: {action.help!r}")
    assert not twice, "\n".join(twice)


def test_the_options_defaults_are_the_code_that_takes_them() -> None:
    import inspect

    from air.launch.process_control import stop_processes
    from air.serving.models.tiny_model import TinyModelSpec
    from air.serving.server import serve_forever

    served = inspect.signature(serve_forever).parameters
    server = {a.dest: a.default for a in _subparser(["policy-server"])._actions}
    assert (server["host"], server["port"], server["seed"]) == tuple(
        served[n].default for n in ("host", "port", "seed")
    )
    assert {a.dest: a.default for a in _subparser(["tiny-model"])._actions}["seed"] == TinyModelSpec().seed
    grace = inspect.signature(stop_processes).parameters["grace"].default
    for command in ("clean", "train"):
        assert {a.dest: a.default for a in _subparser([command])._actions}["grace"] == grace


def test_fleet_node_leaves_its_defaults_to_node_options(tmp_path: Path) -> None:
    """--host, --bind and --port left out are NodeOptions' own, not copies the parser keeps."""
    args = build_parser().parse_args(["fleet", "node", str(tmp_path)])
    assert (args.host, args.bind, args.port) == (None, None, None)


def test_a_field_of_several_types_is_read_by_the_model() -> None:
    """A union the parser cannot type (a number or a word) goes to the model as text, which reads it."""
    from air.cli.options import add_model_options, settings_from_args

    class Timeout(BaseModel):
        timeout: float | Literal["auto"] = Field("auto", description="seconds, or auto")

    parser = argparse.ArgumentParser(prog="toy")
    add_model_options(parser, Timeout)
    assert settings_from_args(Timeout, parser.parse_args(["--timeout", "2.5"])).timeout == 2.5
    assert settings_from_args(Timeout, parser.parse_args([])).timeout == "auto"
    with pytest.raises(CommandError, match="^--timeout: "):
        settings_from_args(Timeout, parser.parse_args(["--timeout", "soon"]))
