"""What the browser tests do to a page of the viewer (the page itself: conftest's ``page`` fixture)."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from air.viewer.plain import JOINER

TIMEOUT_MS = 60_000


@contextlib.contextmanager
def open_page(chromium: str) -> Iterator:
    """A page of headless Chromium driven by Playwright's sync API (which wants a thread without a running
    event loop: an async test calls this in a thread of its own)."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=chromium, headless=True, args=["--no-sandbox"])
        try:
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.set_default_timeout(TIMEOUT_MS)
            yield page
        finally:
            browser.close()


def main_area(page):
    """The main column (the sidebar left out)."""
    return page.locator('[data-testid="stMain"]')


def settled(page) -> None:
    """Wait until the script run is over: no element is left over from before it."""
    page.wait_for_function("() => !document.querySelector('[data-stale=\"true\"]')")
    page.locator('[data-testid="stStatusWidget"]').wait_for(state="hidden")


def shown_text(locator) -> str:
    """What the locator shows, whitespace collapsed, the escaping's invisible word joiners left out."""
    return " ".join(locator.inner_text().replace(JOINER, "").split())


def outside_urls(page) -> list[str]:
    """Every href / src / srcset on the page that leaves the viewer's own origin (mailto: included)."""
    return page.evaluate(
        """() => {
            const found = [];
            for (const el of document.querySelectorAll('[href], [src], [srcset]')) {
                for (const name of ['href', 'src', 'srcset']) {
                    const value = el.getAttribute(name);
                    if (!value || value.startsWith('data:') || value.startsWith('blob:')) continue;
                    for (const part of name === 'srcset' ? value.split(',') : [value]) {
                        let origin = null;
                        try { origin = new URL(part.trim().split(' ')[0], location.href).origin; } catch {}
                        if (origin !== location.origin) found.push(`${el.tagName} ${name}=${value}`);
                    }
                }
            }
            return found;
        }"""
    )


def marked_up(page, tokens: list[str]) -> list[str]:
    """Markup made around any of ``tokens`` (words the agent wrote): links, bold, italics, strike-through,
    headings, list items, quotes, images, maths, coloured text and badges, material icons."""
    return page.evaluate(
        """tokens => {
            const tags = 'a, strong, b, em, i, del, s, h1, h2, h3, h4, h5, h6, li, blockquote, img, .katex, '
                + 'span[class*="stMarkdownColored"], span[class*="stMarkdownBadge"], [data-testid="stIconMaterial"]';
            const found = [];
            for (const el of document.querySelectorAll(tags)) {
                const text = el.textContent + ' ' + (el.getAttribute('alt') || '');
                for (const token of tokens) {
                    if (new RegExp(`\\\\b${token}\\\\b`).test(text)) found.push(`${el.tagName}: ${text}`);
                }
            }
            return found;
        }""",
        [re.escape(t) for t in tokens],
    )


def check_page(page, tokens: list[str]) -> None:
    """Nothing on the page leads outside, and none of ``tokens`` was made into markup."""
    leads_out = outside_urls(page)
    assert not leads_out, f"links or images to outside sites: {leads_out}"
    made = marked_up(page, tokens)
    assert not made, f"markup made from the agent's text: {made}"
