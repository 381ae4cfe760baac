"""A real browser for tests: Debian's chromium driven by Playwright; screenshots go to test-artifacts/."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from playwright.sync_api import BrowserContext, Page, sync_playwright

from tests.conftest import PASSWORD

ARTIFACTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
    "--disable-sync", "--no-first-run", "--disable-quic",
]  # fmt: skip


@contextmanager
def browser_page() -> Iterator[Page]:
    assert Path(CHROMIUM).exists(), "make test installs Debian's chromium"
    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        # A context of our own: a second tab shares the signed-in session.
        yield browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        browser.close()


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
