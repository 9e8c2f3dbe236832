"""The viewer shows the agent's text as text (issue 50): in a real browser (headless Chromium against a real
`air view`), a rollout whose commands, replies, outputs and error messages are written to render as Markdown
or HTML (bold, links, bare URLs, images, colours, LaTeX, headings) shows every one of them literally: no link
or image to an outside site, no bold or heading made from them, and a command that reads like a score stays
visibly a command (set in code), apart from the viewer's own evaluation mark."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from air.env.trajectories import BaselineInfo, TrajectoryRecord, Turn, TurnEvaluation, write_trajectory
from rigs.viewer_server import viewer_server
from tests.viewer.browser import check_page, main_area, settled, shown_text

pytest.importorskip("playwright.sync_api")

# First lines of commands (titles keep 80 characters): each token after Z is unique, to find it on the page.
FORGED = "validate: score **Z4.9990** https://example.com/x <b>ZB</b> _ZI_"
LINKS = "echo [ZL](https://evil.example) www.evil.example root@evil.example ~~ZS~~"
EXTRAS = "![ZP](https://evil.example/p.png) :red[ZR] $ZM^2$ &amp; `ZT` :material/home:"
# Errors the agent's text passes into (several lines: headings, lists, quotes, HTML).
HOSTILE_ERROR = (
    "first **ZE** www.evil.example/e\n# ZH heading\n\n- ZLI item\n> ZQ quote\n<a href='https://evil.example'>ZA</a>"
)
TOKENS = ["Z4.9990", "ZB", "ZI", "ZL", "ZS", "ZP", "ZR", "ZM", "ZT", "ZE", "ZH", "ZLI", "ZQ", "ZA"]


def hostile_record() -> TrajectoryRecord:
    def turn(index: int, command: str | None, **extra) -> Turn:
        return Turn(
            index=index,
            model_text=f"I run it.\n```bash\n{command}\n```",
            command=command,
            output=command or "",
            **extra,
        )

    failed = TurnEvaluation(status="evaluation_failed", score=None, metrics=None, error=HOSTILE_ERROR)
    return TrajectoryRecord(
        id="0bad0bad0001",
        task="hostile",
        policy="scripted-forger",
        started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        duration_s=9.0,
        exit_status="max_turns",
        error=HOSTILE_ERROR,
        task_prompt=HOSTILE_ERROR,  # task-provided text: shown as text as well
        baseline=BaselineInfo(metric="accuracy", score=0.5, metrics={"accuracy": 0.5}),
        reward=0.0,
        turns=[
            turn(1, FORGED + "\nsecond line", exit_code=0, evaluation=TurnEvaluation(status="ok", score=0.5, metrics={})),  # noqa: E501
            turn(2, LINKS, exit_code=0),
            turn(3, EXTRAS, exit_code=0),
            turn(4, None, format_error=HOSTILE_ERROR),
            turn(5, "validate", evaluation=failed),
        ],
    )  # fmt: skip


def test_the_agents_text_shows_as_text_in_titles_errors_and_compare(page, tmp_path: Path) -> None:
    path = write_trajectory(hostile_record(), tmp_path / "runs")
    key = path.relative_to(tmp_path / "runs").as_posix()
    with viewer_server(tmp_path / "runs") as url:
        page.goto(f"{url}/?rollout={key}")
        main = main_area(page)
        main.get_by_text("Jump to step").wait_for()
        page.get_by_text("Show all steps").click()
        main.get_by_text("Step 5 of 5").wait_for()
        settled(page)
        check_page(page, TOKENS)
        body = shown_text(main)
        for line in (FORGED, LINKS, EXTRAS, *filter(None, HOSTILE_ERROR.splitlines())):
            assert line in body, line
        # The title sets the command apart, in code: "validate: score ..." cannot pass for the viewer's own mark.
        title = main.locator('[data-testid="stMarkdownContainer"]').filter(has_text="Step 1 of 5")
        assert shown_text(title.locator("code")) == FORGED
        assert shown_text(title.locator("strong")) == "Step 1 of 5"
        assert "validate: score 0.5000" in shown_text(title)

        main.get_by_text("Compare", exact=True).click()  # titles as expander labels
        summaries = main.locator('[data-testid="stExpander"] summary')
        summaries.filter(has_text="Step 5 of 5").first.wait_for()
        settled(page)
        check_page(page, TOKENS)
        labels = [shown_text(s) for s in summaries.all()]
        for line in (FORGED, LINKS, EXTRAS):
            assert any(f"Step {n} of 5: {line}" in label for label in labels for n in (1, 2, 3)), (line, labels)
        forged = summaries.filter(has_text="Step 1 of 5").first
        assert shown_text(forged.locator("code")) == FORGED

        for view, shown in (("Overview", "rollouts shown"), ("Problems", "rollouts were read")):
            main.get_by_text(view, exact=True).click()
            main.get_by_text(shown).wait_for()
            settled(page)
            check_page(page, TOKENS)
