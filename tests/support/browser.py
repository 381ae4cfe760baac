"""A real browser for tests: Debian's chromium driven by Playwright; screenshots go to test-artifacts/.

A test process starts one Chromium and keeps it while the tests it runs use a browser (tests/conftest.py closes it
before a test that does not); each ``browser_page()`` is a new browser context of its own, so no cookie, storage or
permission passes from one test to the next.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Browser, BrowserContext, Page, Playwright, ViewportSize, sync_playwright

from tests.conftest import PASSWORD

ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip
VIEWPORT: ViewportSize = {"width": 1280, "height": 900}


@dataclass
class _Running:
    playwright: Playwright
    browser: Browser
    loop: asyncio.AbstractEventLoop


_running: _Running | None = None


@contextmanager
def browser_page() -> Iterator[Page]:
    """A page in a new context of this process's Chromium; the contexts opened in the block (a second tab's shares
    the signed-in session, ``page.context.browser.new_context()`` is a second person) are closed after it."""
    browser = _resume()
    before = list(browser.contexts)
    try:
        yield browser.new_context(viewport=VIEWPORT).new_page()
    finally:
        for context in browser.contexts:
            if not any(context is kept for kept in before):
                with contextlib.suppress(Exception):  # a crashed browser: the next test starts another
                    context.close()
        _park()


def close_shared_browser() -> None:
    """Stop this process's Chromium and its Playwright driver, if started."""
    global _running
    running, _running = _running, None
    if running is None:
        return
    asyncio._set_running_loop(running.loop)
    with contextlib.suppress(Exception):  # already gone (it crashed): stopping the driver is what is left
        running.browser.close()
    running.playwright.stop()


def _resume() -> Browser:
    global _running
    if _running is not None and not _running.browser.is_connected():
        close_shared_browser()
    if _running is None:
        assert Path(CHROMIUM).exists(), "make test installs Debian's chromium"
        ARTIFACTS.mkdir(exist_ok=True)
        playwright = sync_playwright().start()
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        _running = _Running(playwright, browser, asyncio.get_running_loop())
    asyncio._set_running_loop(_running.loop)
    return _running.browser


def _park() -> None:
    # Playwright's sync API marks its event loop as this thread's running loop from its first call until it stops
    # (it runs the loop in a greenlet of this thread). While the browser waits for the next test, the mark is
    # lifted, so that the tests in between may run event loops of their own (asyncio.run); _resume sets it again.
    asyncio._set_running_loop(None)


def sign_in_page(page: Page, url: str, email: str = "alice@example.com") -> None:
    page.goto(f"{url}/login")
    page.fill("input[name=email]", email)
    page.fill("input[name=password]", PASSWORD)
    page.click("form.stack button[type=submit]")


# Chromium logs CSP violations as console errors too; the event says which directive and what it blocked.
REPORT_VIOLATIONS = """
document.addEventListener("securitypolicyviolation", (event) => {
  console.error(`CSP violation: ${event.violatedDirective} blocked ${event.blockedURI || "inline code"}`
    + ` (${event.sourceFile || "the page"}:${event.lineNumber})`);
});
"""


def watch_for_problems(context: BrowserContext, origin: str = "") -> list[str]:
    """Every console error (CSP violations included) and uncaught JS error in the pages of ``context`` (those under
    ``origin`` only, when given: an identity provider's pages are not ours to judge), as text."""
    problems: list[str] = []
    context.add_init_script(REPORT_VIOLATIONS)

    def note(page: Page | None, text: str) -> None:
        url = page.url if page is not None else "?"
        if url.startswith(origin):
            problems.append(f"{url}: {text}")

    context.on("console", lambda message: note(message.page, message.text) if message.type == "error" else None)
    context.on("weberror", lambda error: note(error.page, str(error.error)))
    return problems
