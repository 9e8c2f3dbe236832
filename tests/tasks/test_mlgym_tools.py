"""MLGym's agent commands read from a checkout: parsing, docs, heredoc guard, install and use in a shell.

The synthetic tools come from ``tests.mlgym_like.write_mlgym_like_tools`` (written from scratch).
Set MLGYM_ROOT to a real MLGym checkout to also check its own command files.
"""

from __future__ import annotations

import dataclasses
import io
import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import yaml

from air.sandbox.config import WORKSPACE
from air.tasks import mlgym_tools
from air.tasks.mlgym_tools import COMMANDS_DIR, ToolsError, ToolSet, guard_multiline, load_mlgym_tools
from rigs.patience import backstop
from tests.mlgym_like import (
    TOOLS_ENV,
    TOOLS_SUBMIT_MARKER,
    TOOLS_VALIDATE_MARKER,
    write_mlgym_like_root,
    write_mlgym_like_tools,
)
from tests.opt_in import MLGYM_CHECKOUT

MLGYM_ROOT = MLGYM_CHECKOUT or None  # captured before conftest clears $MLGYM_ROOT
needs_checkout = pytest.mark.skipif(not MLGYM_ROOT, reason="set MLGYM_ROOT to a real MLGym checkout to run this")


@pytest.fixture
def tools_root(tmp_path: Path) -> Path:
    return write_mlgym_like_tools(tmp_path / "root")


@pytest.fixture
def toolset(tools_root: Path) -> ToolSet:
    ts = load_mlgym_tools(tools_root)
    assert ts is not None
    return ts


def _set_command_files(root: Path, files: list[str], **tools: object) -> None:
    config = root / "configs" / "agents" / "default.yaml"
    data = yaml.safe_load(config.read_text())
    data["tools"]["command_files"] = files
    data["tools"].update(tools)
    config.write_text(yaml.safe_dump(data))


# ---------------------------------------------------------------- loading


def test_roots_without_tools_or_agent_config_have_none(tmp_path: Path) -> None:
    tasks_only = write_mlgym_like_root(tmp_path / "tasks_only")
    assert load_mlgym_tools(tasks_only) is None
    no_config = tmp_path / "no_config"
    (no_config / "tools").mkdir(parents=True)
    assert load_mlgym_tools(no_config) is None


def test_commands_are_parsed_from_their_yaml_headers(toolset: ToolSet) -> None:
    by_name = {cmd.name: cmd for cmd in toolset.commands}
    assert list(by_name) == ["open", "goto", "edit", "wordcount", "validate", "submit"]
    assert by_name["open"].signature == "open <path> [<line>]"
    assert by_name["goto"].signature == "goto <line>"  # built from its arguments (header has none)
    assert by_name["edit"].signature.splitlines() == ["edit <first>:<last>", "<new_lines>", "end_of_edit"]
    assert by_name["edit"].end_name == "end_of_edit"
    assert by_name["open"].end_name is None
    assert by_name["open"].arguments["line"]["required"] is False
    assert by_name["open"].arguments["path"]["required"] is True
    assert by_name["wordcount"].source == "tools/wordcount.py"
    assert by_name["submit"].source == "tools/marks.sh"


def test_files_are_classified_as_mlgym_installs_them(toolset: ToolSet, tools_root: Path) -> None:
    assert toolset.source_files == ["viewer.sh", "editor.sh", "marks.sh"]
    assert toolset.scripts == ["_helper", "wordcount"]  # shebang files lose their suffix
    assert set(toolset.files) == {"viewer.sh", "editor.sh", "marks.sh", "_helper", "wordcount", "_notes.txt"}
    assert toolset.files["_notes.txt"] == (tools_root / "tools" / "_notes.txt").read_bytes()
    assert toolset.files["wordcount"] == (tools_root / "tools" / "wordcount.py").read_bytes()
    names = {cmd.name for cmd in toolset.commands}
    assert not {"_show", "_helper", "_notes.txt"} & names  # helpers and utilities are not documented


def test_env_variables_become_strings(toolset: ToolSet) -> None:
    assert toolset.env_variables == {key: str(value) for key, value in TOOLS_ENV.items()}
    assert toolset.env_variables["WINDOW"] == "3"


def test_docs_show_each_signature_docstring_and_argument(toolset: ToolSet) -> None:
    docs = toolset.docs()
    for cmd in toolset.commands:
        assert cmd.signature in docs
        assert cmd.docstring.replace("{WINDOW}", "3") in docs
        for spec in cmd.arguments.values():
            assert spec["description"] in docs
    assert "shows 3 lines of a file" in docs  # {WINDOW} filled in from the env variables
    assert "_show" not in docs


def test_multiline_commands(toolset: ToolSet) -> None:
    assert toolset.multiline_commands() == {"edit": "end_of_edit"}


# ---------------------------------------------------------------- heredoc guard

MULTI = {"edit": "end_of_edit", "insert": "end_of_insert"}


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        pytest.param(
            "edit 1:2\nx = 1\nend_of_edit",
            "edit 1:2 << 'end_of_edit'\nx = 1\nend_of_edit",
            id="one",
        ),
        pytest.param(
            "edit 1:2 << 'end_of_edit'\nx = 1\nend_of_edit",
            "edit 1:2 << 'end_of_edit'\nx = 1\nend_of_edit",
            id="already-guarded",
        ),
        pytest.param(
            "ls -la\ncd src\nedit 3:3\n    return y\nend_of_edit\npython x.py",
            "ls -la\ncd src\nedit 3:3 << 'end_of_edit'\n    return y\nend_of_edit\npython x.py",
            id="text-before-and-after",
        ),
        pytest.param(
            "edit 1:1\na\nend_of_edit\ninsert 4\nb\nedit 9:9\nend_of_insert",
            "edit 1:1 << 'end_of_edit'\na\nend_of_edit\ninsert 4 << 'end_of_insert'\nb\nedit 9:9\nend_of_insert",
            id="several-and-a-name-inside-a-body",
        ),
        pytest.param("python train.py --edit 3\necho editor", "python train.py --edit 3\necho editor", id="none"),
        pytest.param("editor 1:1\nx\nend_of_edit", "editor 1:1\nx\nend_of_edit", id="prefix-is-not-the-name"),
        pytest.param("  edit 2:2  \ny\nend_of_edit", "  edit 2:2 << 'end_of_edit'\ny\nend_of_edit", id="indented"),
        pytest.param("edit 2:2\ny", "edit 2:2 << 'end_of_edit'\ny", id="no-end-line"),
    ],
)
def test_guard_multiline(command: str, expected: str) -> None:
    assert guard_multiline(command, MULTI) == expected
    assert guard_multiline(expected, MULTI) == expected  # idempotent


def test_guard_multiline_without_multiline_commands_changes_nothing() -> None:
    assert guard_multiline("edit 1:1\nx\nend_of_edit", {}) == "edit 1:1\nx\nend_of_edit"


# ---------------------------------------------------------------- archive and shell set-up


def test_install_archive_holds_the_files_with_their_modes(toolset: ToolSet) -> None:
    with tarfile.open(fileobj=io.BytesIO(toolset.install_archive())) as tar:
        members = {m.name: m for m in tar.getmembers()}
        assert members["commands"].isdir()
        for name, data in toolset.files.items():
            member = members[f"commands/{name}"]
            extracted = tar.extractfile(member)
            assert extracted is not None and extracted.read() == data
            assert member.mode == (0o755 if name in toolset.scripts else 0o644), name
    assert set(members) == {"commands"} | {f"commands/{name}" for name in toolset.files}


def _install_locally(toolset: ToolSet, where: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """Unpack the archive on this machine and return an init script that points there."""
    with tarfile.open(fileobj=io.BytesIO(toolset.install_archive())) as tar:
        tar.extractall(where, filter="tar")
    monkeypatch.setattr(mlgym_tools, "COMMANDS_DIR", str(where / "commands"))
    return toolset.init_script()


def _bash(script: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(cwd)}
    return subprocess.run(
        ["bash", "--noprofile", "--norc", "-c", script],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=backstop(30),
    )


def test_init_script_exports_awkward_values_exactly(toolset: ToolSet, tmp_path: Path) -> None:
    only_vars = dataclasses.replace(toolset, source_files=[])
    names = list(toolset.env_variables)
    # Print each variable from a child process (so it must be exported), NUL-separated.
    readback = "python3 -c 'import os, sys; sys.stdout.write(\"\\0\".join(os.environ[n] for n in sys.argv[1:]))' "
    done = _bash(only_vars.init_script() + readback + " ".join(names), tmp_path)
    assert done.returncode == 0, done.stderr
    assert dict(zip(names, done.stdout.split("\0"), strict=True)) == toolset.env_variables
    assert toolset.env_variables["CURRENT_FILE"] == "" and toolset.env_variables["SEARCH_RESULTS"] == "()"


def test_init_script_puts_commands_first_on_path(toolset: ToolSet, tmp_path: Path) -> None:
    done = _bash(dataclasses.replace(toolset, source_files=[]).init_script() + 'echo "$PATH"', tmp_path)
    assert done.stdout.strip().split(":")[0] == COMMANDS_DIR


def test_init_script_names_the_files_that_fail_to_source(
    toolset: ToolSet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = dict(toolset.files, **{"editor.sh": b"edit() {\n  echo never closed\n"})
    init = _install_locally(dataclasses.replace(toolset, files=broken), tmp_path, monkeypatch)
    done = _bash(init, tmp_path)
    assert done.returncode != 0
    assert "editor.sh" in done.stderr
    assert "viewer.sh" not in done.stderr.split("cannot source")[-1]


def test_commands_work_in_a_local_bash(toolset: ToolSet, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    init = _install_locally(toolset, tmp_path / "home", monkeypatch)
    work = tmp_path / "work"
    work.mkdir()
    (work / "poem.txt").write_text("one\ntwo\nthree\nfour\n")
    action = guard_multiline(
        "open poem.txt\nedit 2:3\nTWO\nTHREE\nand a half\nend_of_edit", toolset.multiline_commands()
    )
    done = _bash(init + action + "\nwordcount poem.txt\nvalidate\n", work)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (work / "poem.txt").read_text() == "one\nTWO\nTHREE\nand a half\nfour\n"
    assert "[5 lines now]" in done.stdout  # the _helper script ran from the commands folder
    assert "words: 7" in done.stdout
    assert TOOLS_VALIDATE_MARKER in done.stdout


# ---------------------------------------------------------------- errors


def test_missing_command_file_is_named(tools_root: Path) -> None:
    _set_command_files(tools_root, ["tools/viewer.sh", "tools/not_there.sh"])
    with pytest.raises(ToolsError, match="not_there.sh"):
        load_mlgym_tools(tools_root)


def test_bad_yaml_header_names_file_and_command(tools_root: Path) -> None:
    (tools_root / "tools" / "bad.sh").write_text("# @yaml\n# docstring: [never closed\nbroken() {\n  true\n}\n")
    _set_command_files(tools_root, ["tools/bad.sh"])
    with pytest.raises(ToolsError, match=r"bad\.sh.*'broken'.*not valid YAML"):
        load_mlgym_tools(tools_root)


def test_header_without_docstring_is_an_error(tools_root: Path) -> None:
    (tools_root / "tools" / "nodoc.sh").write_text("# @yaml\n# signature: nodoc\nnodoc() {\n  true\n}\n")
    _set_command_files(tools_root, ["tools/nodoc.sh"])
    with pytest.raises(ToolsError, match=r"nodoc\.sh.*docstring"):
        load_mlgym_tools(tools_root)


def test_unknown_header_key_is_an_error(tools_root: Path) -> None:
    (tools_root / "tools" / "odd.sh").write_text("# @yaml\n# docstring: x\n# colour: red\nodd() {\n  true\n}\n")
    _set_command_files(tools_root, ["tools/odd.sh"])
    with pytest.raises(ToolsError, match=r"odd\.sh.*colour"):
        load_mlgym_tools(tools_root)


def test_file_of_no_known_kind_is_an_error(tools_root: Path) -> None:
    (tools_root / "tools" / "helper.py").write_text("print('no shebang, no underscore')\n")
    _set_command_files(tools_root, ["tools/helper.py"])
    with pytest.raises(ToolsError, match=r"helper\.py.*shebang"):
        load_mlgym_tools(tools_root)


def test_script_needs_exactly_one_header_unless_it_is_a_helper(tools_root: Path) -> None:
    tools = tools_root / "tools"
    (tools / "twice.py").write_text("#!/usr/bin/env python3\n# @yaml\n# docstring: a\n\n# @yaml\n# docstring: b\n")
    (tools / "bare.py").write_text("#!/usr/bin/env python3\nprint(1)\n")
    _set_command_files(tools_root, ["tools/twice.py"])
    with pytest.raises(ToolsError, match=r"twice\.py.*one @yaml"):
        load_mlgym_tools(tools_root)
    _set_command_files(tools_root, ["tools/bare.py"])
    with pytest.raises(ToolsError, match=r"bare\.py.*no @yaml"):
        load_mlgym_tools(tools_root)


def test_command_defined_twice_is_an_error(tools_root: Path) -> None:
    (tools_root / "tools" / "again.sh").write_text("# @yaml\n# docstring: another open\nopen() {\n  true\n}\n")
    _set_command_files(tools_root, ["tools/viewer.sh", "tools/again.sh"])
    with pytest.raises(ToolsError, match=r"again\.sh.*'open'.*viewer\.sh"):
        load_mlgym_tools(tools_root)


def test_bad_env_variable_name_is_an_error(tools_root: Path) -> None:
    _set_command_files(tools_root, ["tools/viewer.sh"], env_variables={"NOT A NAME": "x"})
    with pytest.raises(ToolsError, match=r"default\.yaml.*NOT A NAME"):
        load_mlgym_tools(tools_root)


def test_agent_config_without_tools_is_an_error(tools_root: Path) -> None:
    config = tools_root / "configs" / "agents" / "default.yaml"
    config.write_text("system_template: hello\n")
    with pytest.raises(ToolsError, match=r"default\.yaml.*tools"):
        load_mlgym_tools(tools_root)


# ---------------------------------------------------------------- in a sandbox


async def _install(sandbox, toolset: ToolSet) -> None:
    await sandbox.put_archive("/home/agent", toolset.install_archive(), owner="agent", top=["commands"])
    result = await sandbox.run(toolset.init_script())
    assert result.exit_code == 0, result.output


@pytest.mark.docker
async def test_synthetic_tools_in_a_sandbox(sandbox, toolset: ToolSet) -> None:
    await _install(sandbox, toolset)
    owners = await sandbox.run(f"stat -c '%U %a %n' {COMMANDS_DIR} {COMMANDS_DIR}/*")
    for line in owners.output.strip().splitlines():
        user, mode, path = line.split()
        assert user == "agent", line
        if path.rsplit("/", 1)[-1] in toolset.scripts or path == COMMANDS_DIR:
            assert mode == "755", line
    await sandbox.write_file(f"{WORKSPACE}/poem.txt", "one\ntwo\nthree\n", owner="agent")
    opened = await sandbox.run("open poem.txt 2")
    assert "2|two" in opened.output and "3|three" in opened.output, opened.output
    action = guard_multiline("edit 1:1\nFIRST\nend_of_edit", toolset.multiline_commands())
    edited = await sandbox.run(action)
    assert edited.exit_code == 0, edited.output
    assert await sandbox.read_file(f"{WORKSPACE}/poem.txt") == b"FIRST\ntwo\nthree\n"
    assert "[3 lines now]" in edited.output
    counted = await sandbox.run("wordcount poem.txt")
    assert "words: 3" in counted.output, counted.output
    validated = await sandbox.run("validate")
    assert TOOLS_VALIDATE_MARKER in validated.output
    submitted = await sandbox.run("submit")
    assert TOOLS_SUBMIT_MARKER in submitted.output


# ---------------------------------------------------------------- a real MLGym checkout (opt-in)


@pytest.fixture
def checkout_tools() -> ToolSet:
    assert MLGYM_ROOT
    ts = load_mlgym_tools(Path(MLGYM_ROOT))
    assert ts is not None, f"{MLGYM_ROOT} has no tools/ or configs/agents/default.yaml"
    return ts


@needs_checkout
def test_checkout_documents_its_commands(checkout_tools: ToolSet) -> None:
    names = {cmd.name for cmd in checkout_tools.commands}
    assert {"open", "goto", "edit", "insert", "validate", "submit", "search_dir"} <= names
    assert checkout_tools.multiline_commands().get("edit") == "end_of_edit"
    docs = checkout_tools.docs()
    assert all(cmd.signature in docs for cmd in checkout_tools.commands)


@needs_checkout
@pytest.mark.docker
async def test_checkout_tools_edit_a_file_in_a_sandbox(sandbox, checkout_tools: ToolSet) -> None:
    await _install(sandbox, checkout_tools)
    created = await sandbox.run("create x.py")
    assert created.exit_code == 0, created.output
    body = "def greet(name):\n    return 'hi ' + name\n"
    action = guard_multiline(f"edit 1:1\n{body}end_of_edit", checkout_tools.multiline_commands())
    assert action.startswith("edit 1:1 << 'end_of_edit'\n")
    edited = await sandbox.run(action)
    assert edited.exit_code == 0, edited.output
    assert await sandbox.read_file(f"{WORKSPACE}/x.py") == body.encode()
    opened = await sandbox.run("open x.py")
    assert "return 'hi ' + name" in opened.output, opened.output
