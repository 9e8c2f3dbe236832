"""The top-level docs stay readable in one sitting: ARCHITECTURE.md (and docs/layout.md, one step deeper)
name folders, not modules, the map on two screens; experiments.md holds today's figures (its history lives in
docs/experiments-history.md); PROJECT_NOTES.md keeps only pitfalls that can still bite; CHANGELOG.md is by
release. Every relative link and #anchor in them (and in docs/decisions/) resolves, by the README's link check."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.test_readme_quickstart import broken_links, prose

ROOT = Path(__file__).resolve().parents[1]
ARCHITECTURE = ROOT / "ARCHITECTURE.md"
EXPERIMENTS = ROOT / "experiments.md"
HISTORY = ROOT / "docs" / "experiments-history.md"
LAYOUT = ROOT / "docs" / "layout.md"
NOTES = ROOT / "PROJECT_NOTES.md"
CHANGELOG = ROOT / "CHANGELOG.md"

# Most lines each page may have: two screens for the map, a page of figures, a reading of pitfalls.
MAX_LINES = {ARCHITECTURE: 110, EXPERIMENTS: 200, NOTES: 400, CHANGELOG: 150}
MAX_WIDTH = 110  # characters per line of ARCHITECTURE.md
SHIMS = {"air/prime_orchestrator.py", "air/run_training.py", "air/visualize.py"}  # entry points it may name


def module_stems(package: Path = ROOT / "air") -> set[str]:
    """Names of the modules inside air/'s folders, less those that are also a folder's name (`launch`)."""
    folders = {p.name for p in package.rglob("*") if p.is_dir()}
    modules = {p.stem for p in package.glob("*/**/*.py") if "builtin" not in p.parts}
    return modules - folders - {"__init__"}


def module_mentions(text: str, stems: set[str]) -> list[str]:
    """What a folder map leaves to the code: paths of Python files under air/ (the three top-level shims are
    entry points and may be named), dotted air.<folder>.<module> names, and a module's bare name in code
    marks (`pool`, `scripts/eval_runner.py`)."""
    paths = set(re.findall(r"\bair/[\w/]+\.py\b", text)) - SHIMS
    dotted = set(re.findall(r"\bair\.[a-z_]+\.[a-z_]+\b", text))
    marked = {m for m in re.findall(r"`([^`\n]+)`", text) if m in stems or Path(m).stem in stems and m.endswith(".py")}
    return sorted(paths | dotted | marked)


def changelog_heading_faults(text: str) -> list[str]:
    """Level-2 headings that are neither `Unreleased` nor a version, and any heading naming an internal issue."""
    faults = []
    for line in prose(text.splitlines()).splitlines():
        if re.match(r"##\s", line) and not re.match(r"##\s+(Unreleased\b|\[?\d+\.\d+(\.\d+)?\b)", line):
            faults.append(f"not a release: {line}")
        if line.startswith("#") and re.search(r"\bissues?\s+#?\d+", line, flags=re.IGNORECASE):
            faults.append(f"names an issue: {line}")
    return faults


@pytest.mark.parametrize("path", sorted(MAX_LINES), ids=lambda p: p.name)
def test_each_top_level_page_is_short(path: Path) -> None:
    lines = len(path.read_text().splitlines())
    assert lines <= MAX_LINES[path], f"{path.name} has {lines} lines (at most {MAX_LINES[path]})"


def test_the_architecture_lines_fit_a_screen() -> None:
    wide = [n for n, line in enumerate(ARCHITECTURE.read_text().splitlines(), 1) if len(line) > MAX_WIDTH]
    assert not wide, f"ARCHITECTURE.md lines over {MAX_WIDTH} characters: {wide}"


@pytest.mark.parametrize("path", [ARCHITECTURE, LAYOUT], ids=lambda p: p.name)
def test_the_maps_name_folders_not_modules(path: Path) -> None:
    named = module_mentions(path.read_text(), module_stems())
    assert not named, f"{path.name} names modules (name their folder; each module's docstring says the rest): {named}"


def test_the_module_check_can_fail() -> None:
    text = (
        "`air/env/` and `air/visualize.py` fine, `launch` a folder; `air/env/core.py`, `air.sandbox.pool`, "
        "`shell` and `scripts/eval_runner.py` are modules"
    )
    stems = module_stems()
    assert {"shell", "eval_runner"} <= stems and "launch" not in stems
    assert module_mentions(text, stems) == ["air.sandbox.pool", "air/env/core.py", "scripts/eval_runner.py", "shell"]


def test_the_experiments_page_holds_today_and_the_archive_the_history() -> None:
    text = EXPERIMENTS.read_text()
    assert not re.search(r"^##\s+History\b", text, flags=re.MULTILINE), "experiments.md still holds its history"
    assert "docs/experiments-history.md" in text, "experiments.md does not point at its archive"
    opening = " ".join(HISTORY.read_text().split("\n\n")[:2]).lower()
    assert "history" in opening and "superseded" in opening, "the archive does not say up front what it is"


def test_the_changelog_is_by_release() -> None:
    faults = changelog_heading_faults(CHANGELOG.read_text())
    assert not faults, "\n".join(faults)


def test_the_changelog_check_can_fail() -> None:
    text = "# Changelog\n\n## Unreleased\n\n### Added\n\n## 0.1.0 - 2026-11-21\n\n## 2026-11-26: round 4 (issue 39)\n"
    assert changelog_heading_faults(text) == [
        "not a release: ## 2026-11-26: round 4 (issue 39)",
        "names an issue: ## 2026-11-26: round 4 (issue 39)",
    ]


def linked_pages() -> list[Path]:
    """The pages the README's link test does not cover (it covers README.md and docs/*.md)."""
    return [ARCHITECTURE, EXPERIMENTS, NOTES, CHANGELOG, *sorted((ROOT / "docs" / "decisions").glob("*.md"))]


@pytest.mark.parametrize("path", linked_pages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_and_anchor_resolves(path: Path) -> None:
    assert not broken_links(path), "\n".join(broken_links(path))


def environment_sizes(readme: str) -> list[str]:
    """The size the README gives the environment set-up syncs, at each place it gives one: the first size
    after "the locked environment" or "the environment it syncs" in a sentence."""
    text = " ".join(readme.split())
    pattern = r"(?:the locked environment|[Tt]he environment it syncs)[^.]*?(\d+(?:\.\d+)? ?[GM]i?B)"
    return [m.replace(" ", "") for m in re.findall(pattern, text)]


def test_the_readme_gives_the_synced_environment_one_size() -> None:
    sizes = environment_sizes((ROOT / "README.md").read_text())
    assert len(sizes) >= 2, f"the README's set-up table and paragraph each say the size: found {sizes}"
    assert len(set(sizes)) == 1, f"the README gives the synced environment different sizes: {sizes}"


def test_the_size_check_can_fail() -> None:
    two = "syncs the locked environment (0.7 GB: x). The environment it syncs is (about 550 MB: y)."
    assert environment_sizes(two) == ["0.7GB", "550MB"]
