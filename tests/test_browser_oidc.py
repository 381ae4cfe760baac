"""The whole product in a real browser, signed in through a real OpenID provider: sign in at the provider's
pages, land on the dashboard, upload the `local` example, publish it, create a workspace, watch it build, and sign
out at the provider too, all under the dashboard's Content-Security-Policy."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page

from tests.conftest import PASSWORD
from tests.support.browser import ARTIFACTS, browser_page, watch_for_problems
from tests.support.daemon_user import daemon_writable_dir
from tests.support.deployment import stop_workspaces
from tests.support.oidc import OidcProvider
from tests.support.server import ServerProcess

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "local"
ACCOUNTS = {
    "erin": {"email": "erin@example.com", "email_verified": True, "preferred_username": "erin", "groups": ["platform"]}
}


@pytest.fixture
def page() -> Iterator[Page]:
    with browser_page() as opened:
        yield opened


def test_sign_in_with_the_provider_then_build_a_workspace(page: Page, tmp_path: Path) -> None:
    server = ServerProcess(tmp_path / "data", "--provisioner-daemons", "1")
    workspaces_root = daemon_writable_dir("workspaces")
    with OidcProvider(server.url, ACCOUNTS, log_path=tmp_path / "idp.log") as idp:
        server.env.update(
            idp.server_env(
                SLIPWAY_OIDC_SIGN_IN_TEXT="Example SSO",
                SLIPWAY_OIDC_ROLE_FIELD="groups",
                SLIPWAY_OIDC_ROLE_MAPPING="platform=template-admin",
            )
        )
        with server:
            try:
                httpx.post(  # an owner exists already: erin arrives as a template admin through the mapping
                    f"{server.url}/api/v2/users/first",
                    json={"username": "alice", "email": "alice@example.com", "password": PASSWORD},
                )
                problems = watch_for_problems(page.context, origin=server.url)
                page.goto(f"{server.url}/workspaces")
                page.click("#oidc-sign-in")  # "Sign in with Example SSO"
                page.wait_for_selector("input[name=login]")  # the provider's own page
                page.screenshot(path=str(ARTIFACTS / "oidc-provider-login.png"))
                page.fill("input[name=login]", "erin")
                page.fill("input[name=password]", "any-password")
                page.click("button[type=submit]")
                page.wait_for_url(f"{server.url}/workspaces")
                assert "erin" in page.locator(".whoami").inner_text()
                page.screenshot(path=str(ARTIFACTS / "oidc-dashboard.png"), full_page=True)

                page.goto(f"{server.url}/templates")
                page.fill("input[name=name]", "local")
                page.set_input_files("input[name=files]", [str(EXAMPLE / "main.tf"), str(EXAMPLE / "README.md")])
                page.fill("textarea[name=variables]", f"workspaces_root={workspaces_root}")
                page.click("form[enctype] button[type=submit]")
                # The import's log streams to its end, and the upload publishes the template by itself.
                page.wait_for_selector("#job-actions a", timeout=120_000)
                assert "Published: this is the active version of" in page.locator("#job-actions").inner_text()
                page.click("#job-actions a")  # the template's page
                page.click("text=Create workspace")
                page.fill("input[name=name]", "sso-ws")
                page.click("form.card button[type=submit]")
                page.wait_for_selector(".log-line", timeout=60_000)
                page.wait_for_selector("#job-actions a", timeout=120_000)
                assert page.locator("#job-status").inner_text().strip() == "succeeded"
                page.screenshot(path=str(ARTIFACTS / "oidc-workspace-built.png"), full_page=True)

                # Sign-out posts to Slipway, which redirects the form on to the provider's end-session page: the
                # policy's form-action must allow the provider, or Chromium stops the redirect.
                page.get_by_role("button", name="Sign out", exact=True).click()
                page.wait_for_url(re.compile(rf"^{re.escape(idp.issuer)}/session/end"))
                page.get_by_role("button", name=re.compile("Yes, sign me out", re.IGNORECASE)).click()
                page.wait_for_url(re.compile(rf"^{re.escape(server.url)}/login"))
                page.goto(f"{server.url}/workspaces")
                page.wait_for_url(re.compile(rf"^{re.escape(server.url)}/login\?next="))
                assert problems == [], "\n".join(problems)
            finally:
                # The workspace's process runs a real agent, which would retry the stopped server for ever.
                stop_workspaces(workspaces_root)
