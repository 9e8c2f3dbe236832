"""Red team, the viewer (issue 50): the agent writes Markdown and HTML into its commands and their output,
played through the env's rollout path (real containers), and the recorded rollout is opened in `air view`
in headless Chromium. Before, a turn's title rendered the command's first line as Markdown: a bare URL
became a live link to an outside site, and the title could read "validate: score 4.9990". Now every word
the agent wrote shows as itself, the command set apart in code from the viewer's own marks."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from rigs.viewer_server import viewer_server
from tests.red_team import run_attack
from tests.viewer.browser import check_page, main_area, open_page, settled, shown_text

pytestmark = pytest.mark.docker
pytest.importorskip("playwright.sync_api")

# Commands whose first line is the attack (one line each, under the title's 80 characters); the shell
# runs them (the first is "command not found", the second prints the same kind of text as its output).
FORGED = "validate: score **Z4.9990** https://example.com/x <b>ZB</b> _ZI_"
PRINTED = "printf '%s\\n' '# ZH' '[ZL](https://evil.example) www.evil.example :red[ZR] $ZM$'"
TOKENS = ["Z4.9990", "ZB", "ZI", "ZH", "ZL", "ZR", "ZM"]


async def test_the_agents_markdown_in_a_recorded_rollout_shows_as_text(
    tmp_path: Path, docker_image: str, chromium: str
) -> None:
    _, record = await run_attack(tmp_path, docker_image, [FORGED, PRINTED])
    assert "ZH" in record.turns[1].output  # the agent's Markdown is in the record, as an attacker wants
    # Playwright's sync API refuses to run inside this test's event loop: the browser gets a thread.
    await asyncio.to_thread(_look_at_the_rollout, tmp_path / "trajectories", chromium)


def _look_at_the_rollout(folder: Path, chromium: str) -> None:
    with viewer_server(folder) as url, open_page(chromium) as page:
        page.goto(url)
        main = main_area(page)
        main.get_by_text("Rollout", exact=True).click()
        main.get_by_text("Jump to step").wait_for()
        page.get_by_text("Show all steps").click()
        main.get_by_text("Step 2 of 2").wait_for()
        settled(page)
        check_page(page, TOKENS)
        title = main.locator('[data-testid="stMarkdownContainer"]').filter(has_text="Step 1 of 2").first
        assert shown_text(title) == f"Step 1 of 2: {FORGED}"  # no mark of ours: nothing was evaluated
        assert shown_text(title.locator("code")) == FORGED
        assert PRINTED in shown_text(main)

        main.get_by_text("Compare", exact=True).click()
        main.locator('[data-testid="stExpander"] summary').filter(has_text="Step 2 of 2").first.wait_for()
        settled(page)
        check_page(page, TOKENS)
        labels = [shown_text(s) for s in main.locator('[data-testid="stExpander"] summary').all()]
        assert f"Step 1 of 2: {FORGED}" in [label.removeprefix("keyboard_arrow_right ") for label in labels]
