"""An invitation in Chromium, end to end: an owner invites by email on the dashboard, the email arrives at a real
SMTP server (aiosmtpd), and the person opens its link, picks a username and password, and is signed in; an admin's
reset then holds her on the change-password page until she chooses her own, and "forgot password" emails a link.

The dashboard is served in-process by werkzeug's threaded server (no `slipway server` needed for pages alone)."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiosmtpd.controller import Controller
from flask import Flask
from playwright.sync_api import Page, expect
from werkzeug.serving import make_server

from app.core.config import Settings
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.accessibility import severe_violations
from tests.support.browser import ARTIFACTS, browser_page, sign_in_page, watch_for_problems
from tests.support.net import free_port
from tests.support.notifications import authenticate
from tests.support.people import WatchedMailbox

pytestmark = pytest.mark.databases("sqlite")


@pytest.fixture
def page() -> Iterator[Page]:
    with browser_page() as opened:
        yield opened


@pytest.fixture
def site(
    tmp_path: Path,
    database_url: str,
    redis_server: str,
    app: Flask,  # flushes Redis for this test
    app_factory: Callable[[Settings], Flask],
    personas: dict[str, Persona],
) -> Iterator[tuple[str, WatchedMailbox]]:
    smtp_port, web_port, mailbox = free_port(), free_port(), WatchedMailbox()
    smtp = Controller(mailbox, hostname="127.0.0.1", port=smtp_port, authenticator=authenticate, auth_require_tls=False)
    url = f"http://127.0.0.1:{web_port}"
    settings = make_settings(
        tmp_path, database_url, redis_server, email_smarthost=f"127.0.0.1:{smtp_port}",
        email_from="slipway@example.com", email_username="mailer", email_password="mail-password", access_url=url,
    )  # fmt: skip
    server = make_server("127.0.0.1", web_port, app_factory(settings), threaded=True)
    serving = threading.Thread(target=server.serve_forever, daemon=True)
    smtp.start()
    serving.start()
    try:
        yield url, mailbox
    finally:
        server.shutdown()
        serving.join()
        smtp.stop()


def test_an_invitation_a_forced_password_change_and_a_reset_by_email_in_the_browser(
    page: Page, site: tuple[str, WatchedMailbox]
) -> None:
    url, mailbox = site
    problems = watch_for_problems(page.context, origin=url)
    sign_in_page(page, url)
    page.goto(f"{url}/users")
    page.fill("#invite-card input[name=email]", "Zoe.Park@example.com")
    page.select_option("#invite-card select[name=role]", "template-admin")
    page.click("#invite-card button[type=submit]")
    expect(page.locator("#invitation-sent")).to_contain_text("zoe.park@example.com")
    expect(page.locator("#pending-invitations")).to_contain_text("template-admin")
    assert severe_violations(page) == []
    page.screenshot(path=str(ARTIFACTS / "people-invitation-sent.png"), full_page=True)

    # Quoted-printable may fold a long line; unfold it before looking.
    found = re.search(re.escape(url) + r"/invite/[\w-]+", mailbox.wait_for(1)[0].replace("=\n", ""))
    assert found, mailbox.messages[0]
    zoe = page.context.browser.new_context().new_page()  # type: ignore[union-attr]
    zoe.goto(found.group(0))
    expect(zoe.locator("input[name=username]")).to_have_value("zoe-park")
    assert severe_violations(zoe) == []
    zoe.fill("input[name=password]", PASSWORD)
    zoe.fill("input[name=confirm_password]", PASSWORD)
    zoe.screenshot(path=str(ARTIFACTS / "people-invitation-accept.png"), full_page=True)
    zoe.click("form.stack button[type=submit]")
    zoe.wait_for_url(f"{url}/workspaces")
    expect(zoe.locator(".whoami")).to_contain_text("zoe-park")
    zoe.screenshot(path=str(ARTIFACTS / "people-invitation-welcome.png"), full_page=True)

    # An owner resets her password: at her next sign-in (by username) she can only choose her own.
    page.goto(f"{url}/users?q=zoe")
    page.get_by_role("link", name="Reset the password of zoe-park").click()
    page.fill("input[name=password]", "temporary-pass")
    page.click("form.stack button[type=submit]")
    expect(page.locator(".flash-success")).to_contain_text("zoe-park's password was reset")
    zoe.goto(f"{url}/templates")  # her session ended with the reset
    zoe.fill("input[name=email]", "zoe-park")
    zoe.fill("input[name=password]", "temporary-pass")
    zoe.click("form.stack button[type=submit]")
    expect(zoe.locator("#must-change-why")).to_be_visible()
    assert severe_violations(zoe) == []
    zoe.screenshot(path=str(ARTIFACTS / "people-forced-password-change.png"), full_page=True)
    zoe.fill("input[name=current_password]", "temporary-pass")
    zoe.fill("input[name=new_password]", "zoes-own-password")
    zoe.fill("input[name=confirm_password]", "zoes-own-password")
    zoe.click("form.stack button[type=submit]")
    zoe.wait_for_url(f"{url}/templates")

    # She forgets it: "Forgot password?" emails a link that sets a new one and signs her in.
    zoe.context.clear_cookies()
    zoe.goto(f"{url}/login")
    zoe.click("#forgot-password")
    zoe.fill("input[name=email]", "zoe.park@example.com")
    zoe.click("form.stack button[type=submit]")
    expect(zoe.locator("#reset-requested")).to_be_visible()
    reset = re.search(re.escape(url) + r"/reset-password/[\w-]+", mailbox.wait_for(2)[1].replace("=\n", ""))
    assert reset, mailbox.messages[1]
    zoe.goto(reset.group(0))
    zoe.fill("input[name=password]", "zoes-newest-password")
    zoe.fill("input[name=confirm_password]", "zoes-newest-password")
    zoe.screenshot(path=str(ARTIFACTS / "people-reset-by-email.png"), full_page=True)
    zoe.click("form.stack button[type=submit]")
    zoe.wait_for_url(f"{url}/workspaces")
    expect(zoe.locator(".whoami")).to_contain_text("zoe-park")
    assert problems == []
