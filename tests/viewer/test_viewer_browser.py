"""The viewer in a real browser: `air view` serving on loopback, headless Chromium (Debian's
package) driven by Playwright. Opens the overview, selects a rollout, steps through it, compares
two rollouts, and saves screenshots (to $AIR_TEST_ARTIFACTS when set, else the test's tmp folder)."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from air.viewer.index import TrajectoryIndex
from rigs.synthetic_runs import MIXED_ROLLOUTS, write_mixed_folder, write_synthetic_run
from rigs.viewer_server import viewer_server
from tests.viewer.browser import main_area as _main
from tests.viewer.browser import settled as _settled

pytest.importorskip("playwright.sync_api")


def _screenshot(page, tmp_path: Path, name: str) -> Path:
    folder = Path(os.environ.get("AIR_TEST_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    page.screenshot(path=str(path), full_page=True)
    return path


def _choose(page, picker: str, typed: str, option: str) -> None:
    """Open a select box by its label, type to filter its options, click the one matching."""
    _main(page).locator('[data-testid="stSelectbox"]').filter(has_text=picker).click()
    page.keyboard.type(typed)
    page.get_by_role("option", name=re.compile(option)).click()


def test_open_select_a_rollout_step_through_it_and_compare(page, tmp_path: Path) -> None:
    folder = write_mixed_folder(tmp_path / "runs")
    with viewer_server(folder) as url:
        page.goto(url)
        main = _main(page)
        main.get_by_text("rollouts shown").wait_for()
        headline = main.locator('[data-testid="stMetric"]').filter(has_text="rollouts shown")
        assert headline.locator('[data-testid="stMetricValue"]').inner_text() == str(MIXED_ROLLOUTS + 2)
        unreadable = main.locator('[data-testid="stMetric"]').filter(has_text="unreadable files")
        assert unreadable.locator('[data-testid="stMetricValue"]').inner_text() == "4"
        main.locator('[data-testid="stDataFrame"]').wait_for()
        page.wait_for_function("() => document.querySelectorAll('[data-testid=\"stVegaLiteChart\"]').length >= 5")
        _settled(page)
        overview = _screenshot(page, tmp_path, "viewer-overview.png")

        # a row of the table opens its rollout (sorted by reward: the best one is the first row)
        rows = TrajectoryIndex(folder).refresh().rollouts
        best = min(rows, key=lambda r: (-(r.reward if r.reward is not None else float("-inf")), r.key))
        grid = main.locator('[data-testid="stDataFrame"]')
        grid.scroll_into_view_if_needed()
        box = grid.bounding_box()
        page.mouse.click(box["x"] + 18, box["y"] + 52)  # the first row's selection box, under the header
        main.get_by_text("Jump to step").wait_for()  # the Rollout view opened ...
        _settled(page)
        main.locator('[data-testid="stCaptionContainer"]').filter(has_text=best.key).wait_for()  # ... on it

        # select a rollout with the picker, typing to filter its options
        _choose(page, "Rollout", "handmade", "handmade · scripted-improver")
        main.get_by_text("handmade · scripted-improver", exact=True).wait_for()
        main.get_by_text("Step 1 of 4: ls -la").wait_for()
        main.get_by_text("quokka_data.csv").wait_for()  # the step's output renders after its header on a busy host
        assert not main.get_by_text("secret plan: look first").is_visible()  # reasoning is folded
        main.get_by_text("Reasoning (folded)").click()
        main.get_by_text("secret plan: look first").wait_for()

        main.get_by_role("button", name="Next step ▶").click()
        main.get_by_text("Format error:").wait_for()
        main.get_by_text("2 fenced code blocks").wait_for()  # what the agent was told, in code
        main.get_by_role("button", name="Next step ▶").click()
        main.get_by_text("exit code 124 · 30.00 s · timed out").wait_for()
        _settled(page)
        rollout = _screenshot(page, tmp_path, "viewer-rollout.png")
        assert "rollout=deep%2Fer%2Fstill%2Fhandmade" in page.url  # the link names the rollout

        # two rollouts side by side
        main.get_by_text("Compare", exact=True).click()
        _choose(page, "Right", "mazeRunner", "mazeRunner · acme-tiny-7b")
        main.get_by_text("mazeRunner · acme-tiny-7b", exact=True).wait_for()
        main.get_by_text("Step 1 of 7: ls").wait_for()  # the right column's own steps
        _settled(page)
        main.get_by_text("handmade · scripted-improver", exact=True).wait_for()
        main.get_by_text("Step 1 of 4: ls -la").wait_for()
        compare = _screenshot(page, tmp_path, "viewer-compare.png")

    for shot in (overview, rollout, compare):
        assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_the_reward_chart_shows_every_run_in_its_legend(page, tmp_path: Path) -> None:
    """Six runs whose names share a long prefix: six entries, each name whole and inside the drawn chart
    (Streamlit's fitted height once cut the sixth off and vega cut each name to the shared prefix)."""
    names = [f"outputs/standalone/20250101-12000{i}-abcdef{i}" for i in range(6)]
    for i, name in enumerate(names):
        write_synthetic_run(tmp_path / "runs" / name / "trajectories", 64, seed=i)
    with viewer_server(tmp_path / "runs") as url:
        page.goto(url)
        chart = _main(page).locator('[data-testid="stVegaLiteChart"]').filter(has_text="Reward per step")
        chart.locator("g.role-legend-label text").nth(5).wait_for(state="attached")
        _settled(page)
        labels = chart.locator("g.role-legend-label text").evaluate_all(
            """texts => texts.map(text => {
                const drawn = text.ownerSVGElement.getBoundingClientRect(), box = text.getBoundingClientRect();
                return [text.textContent, box.top >= drawn.top && box.bottom <= drawn.bottom];
            })"""
        )
        _screenshot(page, tmp_path, "viewer-six-runs.png")
    assert labels == [[name, True] for name in names]
