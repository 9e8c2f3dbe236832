"""The browser tests' page: headless Chromium (Debian's package, the session's ``chromium`` fixture)
driven by Playwright; skipped where Playwright is missing."""

from __future__ import annotations

import pytest

from tests.viewer.browser import open_page


@pytest.fixture
def page(chromium: str):
    pytest.importorskip("playwright.sync_api")
    with open_page(chromium) as page:
        yield page
