"""A person watching a build in a real browser (Debian's chromium driven by Playwright)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page

from tests.conftest import PASSWORD, run_cli
from tests.support.browser import ARTIFACTS, browser_page, sign_in_page
from tests.support.server import ServerProcess
from tests.support.templates import SLOW_TEMPLATE


@pytest.fixture
def page() -> Iterator[Page]:
    with browser_page() as opened:
        yield opened


def test_build_log_streams_into_the_page(page: Page, tmp_path: Path) -> None:
    template = tmp_path / "slow"
    template.mkdir()
    (template / "main.tf").write_text(SLOW_TEMPLATE)
    with ServerProcess(tmp_path / "data", "--provisioner-daemons", "1") as server:
        httpx.post(
            f"{server.url}/api/v2/users/first",
            json={"username": "alice", "email": "alice@example.com", "password": PASSWORD},
        )
        env = {k: v for k, v in os.environ.items() if not k.startswith("SLIPWAY_")}
        env["XDG_CONFIG_HOME"] = str(tmp_path / "config")
        assert (
            run_cli("login", server.url, "--email", "alice@example.com", env=env, input_text=f"{PASSWORD}\n").returncode
            == 0
        )
        pushed = run_cli("templates", "push", "slow", "-d", str(template), env=env)
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr

        sign_in_page(page, server.url)
        page.goto(f"{server.url}/workspaces/new?template=slow")
        page.fill("input[name=name]", "watched")
        page.click("form.card button[type=submit]")

        # The first line arrives while Terraform still sleeps: the badge says starting, not yet running.
        page.wait_for_selector("text=first-line-out", timeout=30_000)
        assert page.locator("#job-status").inner_text().strip() == "starting"
        assert page.locator("text=last-line-out").count() == 0
        page.screenshot(path=str(ARTIFACTS / "build-log-while-running.png"), full_page=True)

        page.wait_for_selector("#job-actions a", timeout=30_000)  # the end event replaced the actions
        assert page.locator("#job-status").inner_text().strip() == "running"
        assert page.locator("text=last-line-out").count() == 1
        headers = page.locator(".log-stage").all_inner_texts()
        assert [h.split("\n")[0] for h in headers] == [
            "Setting up",
            "Planning infrastructure",
            "Starting workspace",
            "Cleaning up",
        ]
        planning = page.locator(".log-stage", has_text="Planning infrastructure").locator(
            "xpath=following-sibling::*[1]"
        )
        assert "Terraform" in planning.inner_text()
        refreshing = page.locator(".log-line", has_text="data.coder_workspace.me: Refresh")
        stage_of_refresh = refreshing.first.locator("xpath=preceding-sibling::div[contains(@class,'log-stage')][1]")
        assert stage_of_refresh.inner_text().startswith("Planning infrastructure")  # reads belong to planning
        page.screenshot(path=str(ARTIFACTS / "build-log-finished.png"), full_page=True)

        # The workspace page and the list follow status changes without a reload.
        page.click("#job-actions a")  # "Open workspace"
        page.wait_for_selector(".page-head .status-running")
        listing = page.context.new_page()
        listing.goto(f"{server.url}/workspaces")
        for opened in (page, listing):
            opened.evaluate("window.notReloaded = true")
        stopped = run_cli("stop", "watched", env=env)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        page.wait_for_selector(".page-head .status-stopped", timeout=15_000)
        listing.wait_for_selector("#workspace-table .status-stopped", timeout=15_000)
        assert page.evaluate("window.notReloaded") and listing.evaluate("window.notReloaded")
        page.screenshot(path=str(ARTIFACTS / "workspace-stopped-live.png"), full_page=True)
