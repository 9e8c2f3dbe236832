"""The README's first screen and the documentation's links.

The first 60 lines of README.md tell a new user what this is, the two commands (set-up + main job, tests)
with how long each takes, where the results land and how to look at them, with a screenshot of the viewer.
Every `air ...` command there parses with the real command line and every `bash scripts/x.sh` exists.
Every relative link and #anchor in README.md and docs/*.md resolves. The screenshot script
(scripts/viewer_screenshot.py) is run for real where Docker and Chromium are there.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
import unicodedata
from pathlib import Path
from urllib.parse import unquote

import pytest

from rigs.patience import backstop

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
FIRST_SCREEN = 60
SETUP_AND_MAIN_JOB = "bash scripts/setup.sh && uv run air standalone"
TESTS = "bash scripts/test.sh --all"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
DURATION = re.compile(r"\b\d+(?:\.\d+)?\s*(?:s|sec|seconds?|min|minutes?|h|hours?)\b|\ba few minutes\b")


def first_screen(text: str | None = None) -> list[str]:
    return (README.read_text() if text is None else text).splitlines()[:FIRST_SCREEN]


def fenced_lines(lines: list[str]) -> list[str]:
    """The lines inside ``` fences."""
    inside, found = False, []
    for line in lines:
        if line.lstrip().startswith("```"):
            inside = not inside
        elif inside:
            found.append(line)
    return found


def first_code_block(lines: list[str]) -> list[str]:
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("```"))
    end = next(i for i in range(start + 1, len(lines)) if lines[i].lstrip().startswith("```"))
    return lines[start + 1 : end]


def prose(lines: list[str]) -> str:
    """The lines outside fences, joined."""
    inside, kept = False, []
    for line in lines:
        if line.lstrip().startswith("```"):
            inside = not inside
        elif not inside:
            kept.append(line)
    return "\n".join(kept)


def shell_commands(snippet: str) -> list[list[str]]:
    """A shell line split into its simple commands (at &&, ||, ;, |), comments dropped."""
    lexer = shlex.shlex(snippet, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    lexer.commenters = "#"
    commands, current = [], []
    for token in lexer:
        if token in {"&&", "||", ";", "|", "&"}:
            commands.append(current)
            current = []
        else:
            current.append(token)
    commands.append(current)
    return [c for c in commands if c]


def command_snippets(lines: list[str]) -> list[str]:
    """Everything written as code in these lines: each fenced line, and each inline `code` span outside fences."""
    return fenced_lines(lines) + re.findall(r"`([^`\n]+)`", prose(lines))


def air_arguments(command: list[str]) -> list[str] | None:
    """The arguments after `air` of an `air ...` or `uv run air ...` command, else None."""
    if command[:1] == ["air"]:
        return command[1:]
    if command[:3] == ["uv", "run", "air"]:
        return command[3:]
    return None


# ---- the first screen -------------------------------------------------------------------------------------


def test_the_first_code_block_is_the_two_commands_each_with_its_time() -> None:
    block = first_code_block(first_screen())
    commands = [line.split("#", 1)[0].strip() for line in block if line.strip()]
    assert commands == [SETUP_AND_MAIN_JOB, TESTS], f"the first code block must be exactly the two commands: {block}"
    for line in block:
        comment = line.split("#", 1)[1] if "#" in line else ""
        assert DURATION.search(comment), f"no duration in the comment of {line!r}"


def test_it_says_in_one_sentence_what_this_is() -> None:
    lines = first_screen()
    assert lines[0].startswith("# "), "the README starts with its title"
    paragraph = []
    for line in lines[1:]:
        if line.strip().startswith("```"):
            break
        if line.strip():
            paragraph.append(line.strip())
        elif paragraph:
            break
    sentence = " ".join(paragraph)
    assert sentence, "no sentence between the title and the commands"
    ends = re.findall(r"[.!?](?:\s|$)", sentence)
    assert len(ends) == 1 and sentence.endswith("."), f"not one sentence: {sentence!r}"
    for words in ("language models", "reinforcement learning", "Docker"):
        assert words in sentence, f"the sentence does not say {words!r}: {sentence!r}"


def test_where_the_results_land_and_how_to_look_at_them() -> None:
    text = "\n".join(first_screen())
    assert "outputs/standalone/<time>-<id>/" in text
    for name in ("trajectories/", "steps.jsonl", "summary.json", "run.log"):
        assert f"`{name}`" in text, f"the first screen does not name {name}"
    assert "uv run air view outputs/standalone" in text


def test_the_first_screen_shows_the_viewer_screenshot_and_the_file_is_a_small_png() -> None:
    images = re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", prose(first_screen()))
    assert images, "no image in the first screen"
    for target in images:
        path = ROOT / unquote(target)
        assert path.is_file(), f"{target}: no such file"
        assert path.read_bytes()[:8] == PNG_MAGIC, f"{target} is not a PNG"
        assert path.stat().st_size < 400_000, f"{target} is {path.stat().st_size:,} bytes (keep it under 400 KB)"


def test_every_command_on_the_first_screen_parses_and_every_script_exists() -> None:
    from air.cli.main import build_parser

    parsed, scripts = [], []
    for snippet in command_snippets(first_screen()):
        try:
            commands = shell_commands(snippet)
        except ValueError:  # prose in backticks that is not shell (an unmatched quote)
            continue
        for command in commands:
            arguments = air_arguments(command)
            if arguments is not None:
                try:
                    build_parser().parse_args(arguments)
                except SystemExit as exc:
                    pytest.fail(f"`{' '.join(command)}` does not parse (exit {exc.code}); from `{snippet}`")
                parsed.append(command)
            for word in command:  # bash scripts/x.sh, uv run python scripts/x.py
                if word.startswith("scripts/"):
                    assert (ROOT / word).is_file(), f"`{' '.join(command)}`: {word} does not exist"
                    scripts.append(word)
    assert ["uv", "run", "air", "standalone"] in parsed and ["uv", "run", "air", "view", "outputs/standalone"] in parsed
    assert {"scripts/setup.sh", "scripts/test.sh", "scripts/viewer_screenshot.py"} <= set(scripts)


def test_the_command_checks_can_fail() -> None:
    """The parse check sees a wrong option, the script check a missing script."""
    from air.cli.main import build_parser

    (command,) = shell_commands("uv run air standalone --stepz 3  # a typo")
    with pytest.raises(SystemExit):
        build_parser().parse_args(air_arguments(command))
    assert shell_commands("bash scripts/setup.sh && uv run air view x | cat") == [
        ["bash", "scripts/setup.sh"], ["uv", "run", "air", "view", "x"], ["cat"],
    ]  # fmt: skip


# ---- links and anchors --------------------------------------------------------------------------------------


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a heading: markup dropped, lower case, punctuation but - and _ removed,
    spaces to hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link's text stays
    text = text.replace("`", "").strip().lower()
    kept = "".join(ch for ch in text if ch in "-_ " or unicodedata.category(ch)[0] in "LN")
    return kept.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    for line in prose(path.read_text().splitlines()).splitlines():
        if heading := re.match(r"#{1,6}\s+(.+?)\s*#*\s*$", line):
            slug = github_slug(heading.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            found.add(slug if count == 0 else f"{slug}-{count}")
        found |= set(re.findall(r"<a\s+(?:id|name)=\"([^\"]+)\"", line))
    return found


def links(path: Path) -> list[str]:
    """Every link target in a Markdown file, outside code: [text](target), ![alt](target), [ref]: target."""
    text = re.sub(r"`[^`\n]*`", "", prose(path.read_text().splitlines()))
    inline = re.findall(r"\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)", text)
    reference = re.findall(r"^\s*\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+\"[^\"]*\")?\s*$", text, flags=re.MULTILINE)
    return inline + reference


def broken_links(path: Path, root: Path = ROOT) -> list[str]:
    broken = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, flags=re.IGNORECASE):  # https:, mailto:
            continue
        file_part, _, anchor = target.partition("#")
        linked = path if not file_part else (path.parent / unquote(file_part)).resolve()
        if not linked.exists():
            broken.append(f"{path.relative_to(root)}: {target} (no such file)")
        elif anchor and linked.suffix == ".md" and unquote(anchor) not in anchors(linked):
            broken.append(f"{path.relative_to(root)}: {target} (no heading #{anchor} in {linked.name})")
    return broken


def documentation() -> list[Path]:
    return [README, *sorted((ROOT / "docs").glob("*.md"))]


@pytest.mark.parametrize("path", documentation(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert not broken_links(path), "\n".join(broken_links(path))


def test_the_link_check_can_fail(tmp_path: Path) -> None:
    page = tmp_path / "page.md"
    (tmp_path / "other.md").write_text("# Other\n\n## The environment: `air_mlgym`\n\n## Today's prime-rl (v1)\n")
    page.write_text(
        "# Page\n\n[ok](other.md#the-environment-air_mlgym) [ok](other.md#todays-prime-rl-v1) [ok](#page)\n"
        "[bad anchor](other.md#nowhere) [bad file](missing.md) [bad self](#nope)\n"
        "`[in code](missing-too.md)`\n\n```\n[in a fence](missing-three.md)\n```\n"
    )
    assert broken_links(page, tmp_path) == [
        "page.md: other.md#nowhere (no heading #nowhere in other.md)",
        "page.md: missing.md (no such file)",
        "page.md: #nope (no heading #nope in page.md)",
    ]


def test_the_readme_links_to_every_docs_page() -> None:
    """Moved reference stays reachable: each page under docs/ is linked from the README."""
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(README) if not re.match(r"^[a-z]+:", t)}
    orphans = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not orphans, f"docs pages the README does not link: {orphans}"


# ---- the screenshot script ---------------------------------------------------------------------------------

SCRIPT = ROOT / "scripts" / "viewer_screenshot.py"


def test_the_screenshot_script_says_in_one_line_what_is_missing(tmp_path: Path) -> None:
    env = {**os.environ, "AIR_CHROMIUM": str(tmp_path / "no-chromium")}
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--run-dir", str(tmp_path), "--out", str(tmp_path / "x.png")],
        capture_output=True, text=True, env=env, timeout=backstop(120),
    )  # fmt: skip
    assert result.returncode == 1
    errors = result.stderr.strip().splitlines()
    assert len(errors) == 1 and errors[0].startswith("viewer_screenshot: error: "), result.stderr
    assert "Playwright" in errors[0] or "AIR_CHROMIUM" in errors[0]
    assert not (tmp_path / "x.png").exists()


@pytest.mark.docker
def test_the_screenshot_script_runs_a_real_run_and_saves_a_png(docker_image: str, chromium: str, tmp_path: Path):
    """The whole path at its smallest: a 1-step `air standalone` in Docker, `air view`, headless Chromium."""
    pytest.importorskip("playwright.sync_api")
    out = tmp_path / "shot.png"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), "--out", str(out), "--steps", "1", "--batch-size", "4",
         "--width", "1200", "--height", "800"],
        capture_output=True, text=True, env={**os.environ, "AIR_CHROMIUM": chromium}, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    phases = [line for line in result.stdout.splitlines() if re.match(r"viewer_screenshot: \[\d/4\]", line)]
    assert len(phases) == 4, result.stdout
    assert out.read_bytes()[:8] == PNG_MAGIC and 20_000 < out.stat().st_size < 400_000
    from PIL import Image

    with Image.open(out) as image:
        assert image.width == 1200 and 400 <= image.height <= 800
