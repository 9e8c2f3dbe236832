"""MLGym's agent commands (``open``, ``edit``, ``validate`` ...), read at run time from a user's checkout.

MLGym is CC-BY-NC, so its command files never live in this repository: when a task root is a real
MLGym checkout, its agent config (``configs/agents/default.yaml``, key ``tools``) names the command
files, and this module reads them from there, documents them from their own ``@yaml`` comment
headers, and packs them for the sandbox. Each listed file is one of:

- a *script* (starts with a shebang): installed under its name without the last suffix, executable;
  documented by at most one ``@yaml`` block (none is allowed only for ``_``-prefixed helpers);
- a *source file* (``.sh``, no shebang): ``source``d in the agent's shell; each bash function preceded
  by a ``# @yaml`` comment block is a command; functions whose names start with ``_`` are helpers;
- a *utility* (``_``-prefixed, neither of the above): installed only.

Multi-line commands (``end_name`` in their header, e.g. ``edit`` ... ``end_of_edit``) get their body on
stdin through a heredoc guard that ``guard_multiline`` adds to the command's first line.
"""

from __future__ import annotations

import io
import re
import shlex
import tarfile
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

COMMANDS_DIR = "/home/agent/commands"

# `name() {` or `function name {` / `function name() {`, as MLGym's own files write them.
_FUNCTION_DEF = re.compile(r"^\s*(?:function\s+)?([A-Za-z_][\w-]*)\s*(?:\(\s*\))?\s*\{\s*$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


class ToolsError(ValueError):
    """A problem with a checkout's command files or agent config; the message names the file."""


@dataclass(frozen=True)
class ToolCommand:
    """One documented command, as its ``@yaml`` header describes it."""

    name: str
    signature: str
    docstring: str
    arguments: dict[str, dict]
    end_name: str | None
    source: str  # the command file it came from (as listed in the agent config)


@dataclass(frozen=True)
class ToolSet:
    """Everything needed to give the agent's shell MLGym's commands and to document them."""

    commands: list[ToolCommand]
    files: dict[str, bytes]
    source_files: list[str]
    scripts: list[str]
    env_variables: dict[str, str] = field(default_factory=dict)

    def docs(self) -> str:
        """The command reference for the system prompt: each signature, what it does, its arguments."""
        blocks = []
        for cmd in self.commands:
            lines = [cmd.signature, f"  {_fill_env(cmd.docstring, self.env_variables).strip()}"]
            if cmd.end_name and cmd.end_name not in cmd.signature:
                lines.append(f"  (the text after the first line ends at a line holding only {cmd.end_name})")
            if cmd.arguments:
                lines.append("  arguments:")
                for arg, spec in cmd.arguments.items():
                    need = "required" if spec.get("required") else "optional"
                    lines.append(f"    {arg} ({spec.get('type', 'string')}, {need}): {spec.get('description', '')}")
            blocks.append("\n".join(lines))
        return "\n\n".join(blocks) + ("\n" if blocks else "")

    def multiline_commands(self) -> dict[str, str]:
        """Command name -> the line that ends its body."""
        return {cmd.name: cmd.end_name for cmd in self.commands if cmd.end_name}

    def install_archive(self) -> bytes:
        """A tar holding ``commands/`` and its files, to unpack at /home/agent.

        Scripts are 0755, the rest 0644. Ownership is root's in the archive: pass ``owner="agent"``
        and ``top=["commands"]`` to ``Sandbox.put_archive`` so the agent owns the folder.
        """
        folder = PurePosixPath(COMMANDS_DIR).name
        buf = io.BytesIO()
        now = int(time.time())
        with tarfile.open(fileobj=buf, mode="w") as tar:
            info = tarfile.TarInfo(folder)
            info.type, info.mode, info.mtime = tarfile.DIRTYPE, 0o755, now
            tar.addfile(info)
            for name, data in self.files.items():
                info = tarfile.TarInfo(f"{folder}/{name}")
                info.size, info.mtime = len(data), now
                info.mode = 0o755 if name in self.scripts else 0o644
                tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    def init_script(self) -> str:
        """Bash run once in the agent's persistent shell: variables, PATH, then the source files.

        Exits non-zero, naming the files, when any source file fails to load.
        """
        lines = [f"export {key}={shlex.quote(value)}" for key, value in self.env_variables.items()]
        lines.append(f'export PATH={shlex.quote(COMMANDS_DIR)}:"$PATH"')
        lines.append("__air_tools_failed=")
        for name in self.source_files:
            path = shlex.quote(f"{COMMANDS_DIR}/{name}")
            lines.append(f'source {path} || __air_tools_failed="$__air_tools_failed {shlex.quote(name)}"')
        # One status for the whole script: the last line decides what `eval` returns.
        lines.append(
            'if [ -n "$__air_tools_failed" ]; then '
            'echo "cannot source MLGym command file(s):$__air_tools_failed" >&2; unset __air_tools_failed; false; '
            "else unset __air_tools_failed; fi"
        )
        return "\n".join(lines) + "\n"


def guard_multiline(command: str, multiline: dict[str, str]) -> str:
    """Append ``<< 'end_name'`` to the first line of each multi-line command (left alone if already there).

    A command is multi-line when a line's first word is one of ``multiline``'s names; its body runs
    to the next line that is exactly its end name. Everything else is passed through unchanged. A body
    with no end line is still guarded, so it reaches the command instead of running as shell lines.
    """
    if not multiline:
        return command
    lines = command.split("\n")
    i = 0
    while i < len(lines):
        words = lines[i].split(maxsplit=1)
        end_name = multiline.get(words[0]) if words else None
        if end_name is None:
            i += 1
            continue
        if not _has_heredoc(lines[i], end_name):
            lines[i] = f"{lines[i].rstrip()} << '{end_name}'"
        i += 1
        while i < len(lines) and lines[i].rstrip() != end_name:
            i += 1
        i += 1  # past the end line
    return "\n".join(lines)


def _has_heredoc(line: str, end_name: str) -> bool:
    word = re.escape(end_name)
    return re.search(rf"<<-?\s*(?:'{word}'|\"{word}\"|{word})\s*$", line) is not None


class _ToolsSection(BaseModel):
    """The part of MLGym's agent config read here (its other keys are MLGym's business)."""

    model_config = ConfigDict(extra="ignore")

    command_files: list[str] = Field(min_length=1)
    env_variables: dict[str, str | int | float | bool | None] = Field(default_factory=dict)


class _ArgumentSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: str
    description: str
    required: bool


class _YamlHeader(BaseModel):
    """A ``@yaml`` comment header."""

    model_config = ConfigDict(extra="forbid")

    docstring: str
    signature: str | None = None
    end_name: str | None = None
    arguments: dict[str, _ArgumentSpec] | None = None


FileKind = Literal["script", "source", "utility"]


def load_mlgym_tools(task_root: Path, agent_config: str = "configs/agents/default.yaml") -> ToolSet | None:
    """None when the root has no tools/ folder or no agent config (the built-in tasks)."""
    task_root = Path(task_root)
    config_path = task_root / agent_config
    if not (task_root / "tools").is_dir() or not config_path.is_file():
        return None
    section = _read_tools_section(config_path)
    env = {}
    for key, value in section.env_variables.items():
        if not _ENV_NAME.match(key):
            raise ToolsError(f"{config_path}: tools.env_variables has {key!r}, which is not a shell variable name")
        env[key] = _env_text(value)

    commands: list[ToolCommand] = []
    files: dict[str, bytes] = {}
    origin: dict[str, str] = {}  # installed name -> listed file, to report clashes
    source_files: list[str] = []
    scripts: list[str] = []
    for listed in section.command_files:
        path = task_root / listed
        if not path.is_file():
            raise ToolsError(f"{config_path}: tools.command_files lists {listed}, but {path} is not a file")
        data = path.read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolsError(f"{path}: command file is not UTF-8 text ({exc})") from exc
        kind = _kind_of(path, text)
        name = path.name.rsplit(".", 1)[0] if kind == "script" else path.name
        if name in origin:
            raise ToolsError(f"{path}: installs as {name!r}, as {origin[name]} already does")
        origin[name] = listed
        files[name] = data
        if kind == "script":
            scripts.append(name)
            commands += _script_commands(path, listed, name, text)
        elif kind == "source":
            source_files.append(name)
            commands += _function_commands(path, listed, text)

    seen: dict[str, str] = {}
    for cmd in commands:
        if cmd.name in seen:
            raise ToolsError(f"{task_root / cmd.source}: command {cmd.name!r} is also defined in {seen[cmd.name]}")
        seen[cmd.name] = cmd.source
    return ToolSet(commands=commands, files=files, source_files=source_files, scripts=scripts, env_variables=env)


def _read_tools_section(config_path: Path) -> _ToolsSection:
    try:
        raw = yaml.safe_load(config_path.read_text())
    except yaml.YAMLError as exc:
        raise ToolsError(f"{config_path}: not valid YAML ({exc})") from exc
    if not isinstance(raw, dict) or not isinstance(raw.get("tools"), dict):
        raise ToolsError(f"{config_path}: has no 'tools' mapping (with command_files) to read MLGym's commands from")
    try:
        return _ToolsSection.model_validate(raw["tools"])
    except ValidationError as exc:
        raise ToolsError(f"{config_path}: bad 'tools' section: {_brief(exc)}") from exc


def _env_text(value: str | int | float | bool | None) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _kind_of(path: Path, text: str) -> FileKind:
    # The same rules MLGym applies when it installs the files.
    if text.strip().startswith("#!"):
        return "script"
    if path.suffix == ".sh":
        return "source"
    if path.name.startswith("_"):
        return "utility"
    raise ToolsError(
        f"{path}: a command file must start with a shebang (a script), end in .sh (sourced functions), "
        "or have a name starting with '_' (a utility)"
    )


def _script_commands(path: Path, listed: str, name: str, text: str) -> list[ToolCommand]:
    blocks = _yaml_blocks(text.split("\n"))
    if len(blocks) > 1:
        raise ToolsError(f"{path}: a script may carry one @yaml header, this one has {len(blocks)}")
    if not blocks:
        if name.startswith("_"):
            return []  # a helper script: installed, not documented
        raise ToolsError(f"{path}: script has no @yaml header (name it with a leading '_' if it is a helper)")
    return [_command(path, listed, name, blocks[0])]


def _yaml_blocks(lines: list[str]) -> list[str]:
    """Each run of comment lines that starts with ``# @yaml``, without the comment marks."""
    blocks, i = [], 0
    while i < len(lines):
        if _is_yaml_start(lines[i]):
            i += 1
            body = []
            while i < len(lines) and lines[i].startswith("#"):
                body.append(_uncomment(lines[i]))
                i += 1
            blocks.append("\n".join(body))
        else:
            i += 1
    return blocks


def _function_commands(path: Path, listed: str, text: str) -> list[ToolCommand]:
    """Commands of a sourced file: functions right under a ``# @yaml`` comment block (blank lines allowed)."""
    commands = []
    comments: list[str] = []  # the comment lines just above the current line
    for line in text.split("\n"):
        if line.startswith("#"):
            comments.append(line)
            continue
        if not line.strip() and comments:
            continue  # a blank line between a header and its function keeps the header
        match = _FUNCTION_DEF.match(line)
        if match and not match.group(1).startswith("_"):
            header = _header_of(comments)
            if header is not None:
                commands.append(_command(path, listed, match.group(1), header))
        comments = []
    return commands


def _header_of(comments: list[str]) -> str | None:
    starts = [i for i, line in enumerate(comments) if _is_yaml_start(line)]
    if not starts:
        return None
    return "\n".join(_uncomment(line) for line in comments[starts[-1] + 1 :])


def _is_yaml_start(line: str) -> bool:
    return line.startswith("#") and line.lstrip("#").strip() == "@yaml"


def _uncomment(line: str) -> str:
    body = line[1:]
    return body[1:] if body.startswith(" ") else body


def _command(path: Path, listed: str, name: str, header_text: str) -> ToolCommand:
    where = f"{path}: @yaml header of {name!r}"
    try:
        raw: Any = yaml.safe_load(header_text)
    except yaml.YAMLError as exc:
        raise ToolsError(f"{where} is not valid YAML ({exc})") from exc
    if not isinstance(raw, dict):
        raise ToolsError(f"{where} must be a mapping with at least 'docstring', got {type(raw).__name__}")
    try:
        header = _YamlHeader.model_validate(raw)
    except ValidationError as exc:
        raise ToolsError(f"{where}: {_brief(exc)}") from exc
    arguments = {arg: spec.model_dump() for arg, spec in (header.arguments or {}).items()}
    signature = header.signature or _signature_from(name, arguments)
    return ToolCommand(
        name=name,
        signature=signature.strip(),
        docstring=header.docstring,
        arguments=arguments,
        end_name=header.end_name,
        source=listed,
    )


def _signature_from(name: str, arguments: dict[str, dict]) -> str:
    parts = [name] + [f"<{arg}>" if spec["required"] else f"[<{arg}>]" for arg, spec in arguments.items()]
    return " ".join(parts)


def _fill_env(text: str, env: dict[str, str]) -> str:
    """Docstrings may name settings as ``{WINDOW}``; put in the values (other braces stay as they are)."""
    return re.sub(r"\{([A-Za-z_]\w*)\}", lambda m: env.get(m.group(1), m.group(0)), text)


def _brief(exc: ValidationError) -> str:
    return "; ".join(f"{'.'.join(str(p) for p in err['loc']) or '(top)'}: {err['msg']}" for err in exc.errors())
