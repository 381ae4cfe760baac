"""JupyterLab (PyPI) in a real browser: what the path and subdomain app tests do with a notebook."""

from __future__ import annotations

from playwright.sync_api import Page, expect

WAIT = 90_000  # ms: a kernel starting on a busy machine


def run_cell(page: Page, code: str) -> None:
    """Type ``code`` into the notebook's last cell and run it (Shift+Enter), as a person would, once the notebook's
    kernel is connected and idle (the status bar says so)."""
    expect(page.get_by_text("Python 3 (ipykernel) | Idle")).to_be_visible(timeout=WAIT)
    cell = page.locator(".jp-Notebook .jp-Cell .cm-content").last
    cell.click(timeout=WAIT)
    cell.type(code)
    page.keyboard.press("Shift+Enter")


def new_notebook_answers_and_reconnects(page: Page, screenshot_prefix: str, artifacts: str) -> None:
    """On JupyterLab's launcher: a new notebook runs ``print(6*7)`` and shows 42, is saved, and after a reload opens
    again and reconnects to the same kernel (its WebSocket through the proxy again): the variable is still there."""
    page.locator('.jp-LauncherCard[data-category="Notebook"]').first.click(timeout=WAIT)
    run_cell(page, "answer = 6*7\nprint(answer)")
    answers = page.locator(".jp-OutputArea-output", has_text="42")
    expect(answers).to_have_count(1, timeout=WAIT)
    page.get_by_role("button", name="Save and create checkpoint (Ctrl+S)").click()
    page.get_by_role("button", name="Rename and Save").click(timeout=WAIT)  # JupyterLab asks on a first save
    expect(page.locator(".lm-TabBar-tab.jp-mod-dirty")).to_have_count(0, timeout=WAIT)
    page.screenshot(path=f"{artifacts}/{screenshot_prefix}.png")
    page.reload()
    expect(answers).to_have_count(1, timeout=WAIT)  # the saved output
    run_cell(page, "print(answer)")
    expect(answers).to_have_count(2, timeout=WAIT)
    page.screenshot(path=f"{artifacts}/{screenshot_prefix}-reconnected.png")
