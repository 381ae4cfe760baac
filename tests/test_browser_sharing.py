"""The browser the tests share (tests/support/browser.py): one Chromium per test process, a new context per page,
so nothing a test leaves in its browser reaches the next; the tests in between may run event loops of their own."""

from __future__ import annotations

import asyncio

from tests.support.browser import browser_page

PAGE = "data:text/html,<title>shared</title><p>hello</p>"


def test_each_page_is_a_fresh_context_of_the_same_browser() -> None:
    with browser_page() as first:
        first.goto(PAGE)
        first.context.add_cookies([{"name": "left", "value": "behind", "url": "http://127.0.0.1:1/"}])
        assert first.context.browser is not None
        browser = first.context.browser
        second_person = browser.new_context().new_page()  # a context the test opens itself
        assert len(browser.contexts) == 2
    assert browser.contexts == [], "the contexts of the block are closed after it"
    assert second_person.is_closed()

    with browser_page() as second:
        assert second.context.browser is browser, "the same Chromium, not another launch"
        assert second.context.cookies() == []
        second.goto(PAGE)
        assert second.locator("p").inner_text() == "hello"


def test_an_event_loop_runs_between_pages() -> None:
    with browser_page() as page:
        page.goto(PAGE)

    async def answer() -> int:
        await asyncio.sleep(0)
        return 42

    assert asyncio.run(answer()) == 42  # Playwright's own loop is not marked as running meanwhile

    with browser_page() as page:
        page.goto(PAGE)
        assert page.title() == "shared"
