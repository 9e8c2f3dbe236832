"""`air view` on a prime-rl `rl` run, in a real browser (headless Chromium, as test_viewer_browser.py): the run
folder itself (its trajectories went elsewhere: the learning curve from metrics.jsonl alone, and none of its
configs or weights listed as unreadable), and the folder above it holding its trajectories too (the curve heads
the usual overview)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from rigs.synthetic_runs import RL_RUN, write_rl_run
from rigs.viewer_server import viewer_server
from tests.viewer.browser import main_area, settled, shown_text

pytest.importorskip("playwright.sync_api")

CHART = '[data-testid="stVegaLiteChart"]'
PANELS = ["mean reward", "valid-command share", "task score: laneMerge", "validate share", "format penalty"]


def _learning_chart(page):
    chart = main_area(page).locator(CHART).filter(has_text="Learning curve per step")
    chart.wait_for()
    settled(page)
    return chart


def _screenshot(page, tmp_path: Path, name: str) -> None:
    folder = Path(os.environ.get("AIR_TEST_ARTIFACTS") or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name), full_page=True)


def test_air_view_of_an_rl_run_folder_charts_its_learning_curve(page, tmp_path: Path) -> None:
    run = write_rl_run(tmp_path / "out")
    with viewer_server(run) as url:
        page.goto(url)
        chart = _learning_chart(page)
        labels = chart.locator("svg text").all_text_contents()
        for panel in PANELS:
            assert panel in labels, labels
        assert "training step" in labels
        assert chart.locator("svg path.mark-line, svg g.mark-line path").count() >= len(PANELS)
        main = main_area(page)
        assert "prime-rl run" in shown_text(main.locator('[data-testid="stCaptionContainer"]').first)
        assert main.get_by_text("No readable trajectory").count() == 0  # configs/*.json are not trajectories
        assert main.get_by_text("could not be read").count() == 0
        main.get_by_text(f"Per-step numbers of {RL_RUN}").click()
        main.locator('[data-testid="stDataFrame"]').wait_for()
        _screenshot(page, tmp_path, "viewer-rl-run.png")


def test_the_folder_above_the_run_shows_the_curve_and_the_trajectories_overview(page, tmp_path: Path) -> None:
    """benchmarks/learning.py's layout: OUT/rl/<run>/ beside OUT/trajectories/ (the env's trajectory_dir)."""
    out = tmp_path / "learn"
    write_rl_run(out / "rl", trajectory_dir=out / "trajectories")
    with viewer_server(out) as url:
        page.goto(url)
        chart = _learning_chart(page)
        assert set(PANELS) <= set(chart.locator("svg text").all_text_contents())
        main = main_area(page)
        main.locator(CHART).filter(has_text="Reward per step").wait_for()  # the trajectories' own charts
        headline = main.locator('[data-testid="stMetric"]').filter(has_text="rollouts shown")
        assert headline.locator('[data-testid="stMetricValue"]').inner_text() == "16"
        _screenshot(page, tmp_path, "viewer-rl-and-trajectories.png")
