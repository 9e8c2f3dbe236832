"""docs/scaling.md's one-machine walkthrough, read as a newcomer runs it after the README's set-up (issue 53:
it failed on a root machine without sudo, and called `.venv-v1/bin/air`, which nothing in it made).

Checked: the block is valid bash; no command in it is `sudo` itself (root goes through `$SUDO`, which is empty
for root and `sudo` for anyone else: run here as both); every command it runs exists after set-up, is one the
section says to install, or is made earlier in the block; every `air` command line parses; and the cheap
steps (the fleet folder, the job script) run for real."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.printed_hints import REPO

SECTION = "## Trying it on one machine"
# What the README's set-up leaves on PATH (scripts/setup.sh), and what bash itself has.
AFTER_SETUP = {"uv", "docker", "bash", "id", "[", "echo", "eval", "cd", "export"}
SLURM_CLIENT = {"sbatch", "srun", "squeue", "scancel", "sinfo"}  # Debian's slurm-client
MAKES_V1 = re.compile(r"^(UV_PROJECT_ENVIRONMENT=\.venv-v1 uv sync\b|bash scripts/test\.sh\b)")


def _section() -> str:
    text = (REPO / "docs" / "scaling.md").read_text()
    start = text.index(SECTION)
    end = text.find("\n## ", start + len(SECTION))
    return text[start : end if end != -1 else None]


def _block() -> list[str]:
    blocks = re.findall(r"```bash\n(.*?)```", _section(), re.S)
    assert len(blocks) == 1, f"expected one bash block in {SECTION!r}, found {len(blocks)}"
    return [line for line in blocks[0].splitlines() if line.strip() and not line.lstrip().startswith("#")]


def _commands(line: str) -> list[list[str]]:
    """The simple commands of a line, those inside ``$( )`` first, each as words (a substitution is ``X``)."""
    found: list[list[str]] = []
    inner = re.compile(r"\$\(([^()]*)\)")
    while match := inner.search(line):
        found += _simple(match.group(1))
        line = line[: match.start()] + "X" + line[match.end() :]
    return found + _simple(line)


def _simple(text: str) -> list[list[str]]:
    words = shlex.split(text, comments=True)
    commands, current = [], []
    for word in words:
        if word in {";", "&&", "||", "|", "&"}:
            commands.append(current)
            current = []
        else:
            current.append(word)
    commands.append(current)
    # A command's leading NAME=value words set its environment; they are not the command.
    return [[w for n, w in enumerate(c) if not all(re.match(r"^\w+=", x) for x in c[: n + 1])] for c in commands]


def _air_args(command: list[str]) -> list[str] | None:
    if command[:1] == [".venv-v1/bin/air"]:
        return command[1:]
    if command[:3] == ["uv", "run", "air"]:
        return command[3:]
    return None


def test_the_block_is_valid_bash_without_placeholders() -> None:
    done = subprocess.run(["bash", "-n"], input="\n".join(_block()), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_no_command_is_sudo_itself() -> None:
    for line in _block():
        for command in _commands(line):
            assert command[:1] != ["sudo"], f"needs sudo, which a root machine may not have: {line}"


def test_every_command_exists_after_setup_or_is_made_earlier() -> None:
    from air.cli.main import build_parser

    allowed = set(AFTER_SETUP)
    if "slurm-client" in _section():
        allowed |= SLURM_CLIENT
    made_v1 = False
    for line in _block():
        made_v1 = made_v1 or bool(MAKES_V1.match(line))
        for command in _commands(line):
            if not command or command == ["X"]:
                continue
            if command[0] == "$SUDO":
                command = command[1:]
            name = command[0]
            if name == ".venv-v1/bin/air":
                assert made_v1, f"{line}: nothing earlier in the section makes .venv-v1"
            elif name == "bash" and len(command) > 1:
                assert (REPO / command[1]).is_file(), f"{line}: {command[1]} is not in the checkout"
            else:
                assert name in allowed, f"{line}: {name} is neither set up by the README nor named by the section"
            args = _air_args(command)
            if args is not None:
                try:
                    build_parser().parse_args(args)
                except SystemExit as exc:
                    raise AssertionError(f"{line}: air does not take these arguments") from exc


def test_sudo_is_empty_for_root_and_sudo_for_anyone_else() -> None:
    line = next(line for line in _block() if line.startswith("SUDO="))
    script = line.split("#")[0] + '\nprintf "[%s]" "$SUDO"'
    as_user = ["bash", "-c", script]
    if os.geteuid() == 0:
        assert subprocess.run(as_user, capture_output=True, text=True).stdout == "[]"
        nobody = ["setpriv", "--reuid", "65534", "--regid", "65534", "--clear-groups", *as_user]
        assert subprocess.run(nobody, capture_output=True, text=True).stdout == "[sudo]"
    else:
        assert subprocess.run(as_user, capture_output=True, text=True).stdout == "[sudo]"


@pytest.mark.parametrize("step", ["fleet init", "fleet submit", "fleet status"])
def test_the_cheap_steps_run(tmp_path: Path, step: str) -> None:
    """The fleet folder made, the job script written (`--dry-run`: no cluster needed), the status read."""
    lines = [line for line in _block() if line.startswith(".venv-v1/bin/air ")]
    wanted = [".venv-v1/bin/air fleet init", f".venv-v1/bin/air {step}"]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("AIR_", "SLURM"))}
    for line in dict.fromkeys(next(x for x in lines if x.startswith(w)) for w in wanted):
        args = shlex.split(line.replace("/tmp/airfleet", str(tmp_path / "airfleet")), comments=True)[1:]
        if args[:2] == ["fleet", "submit"]:
            args.append("--dry-run")
        done = subprocess.run(
            [sys.executable, "-m", "air.cli.main", *args], cwd=REPO, env=env, capture_output=True, text=True
        )
        assert done.returncode == 0, f"{line}\n{done.stdout}{done.stderr}"
    if step == "fleet submit":
        assert "--host 127.0.0.1 --bind 127.0.0.1" in (tmp_path / "airfleet" / "env-nodes.sbatch").read_text()
