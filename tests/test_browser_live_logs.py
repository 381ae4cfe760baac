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

        # The first line arrives while Terraform still sleeps: the badge says running, not yet succeeded.
        page.wait_for_selector("text=first-line-out", timeout=30_000)
        assert page.locator("#job-status").inner_text().strip() == "running"
        assert page.locator("text=last-line-out").count() == 0
        page.screenshot(path=str(ARTIFACTS / "build-log-while-running.png"), full_page=True)

        page.wait_for_selector("#job-actions a", timeout=30_000)  # the end event replaced the actions
        assert page.locator("#job-status").inner_text().strip() == "succeeded"
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

        # The same deployment, a build that fails: its cause arrives without a reload, the log opens at the error.
        _check_failures_explain_themselves(page, server, env, tmp_path)
        # And one that fails because of a parameter the person just changed.
        _check_a_changed_parameter_is_named(page, server, env, tmp_path)


# A start that prints a long log, then fails in its local-exec while the page watches.
FAILING_LATE_TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
resource "terraform_data" "broken" {
  count = data.coder_workspace.me.start_count
  provisioner "local-exec" {
    command = "seq -f 'filler-%g' 1 200; printf 'about%s\\n' -to-fail; sleep 3; echo 'fails on purpose' >&2; exit 3"
  }
}
"""
SYNTAX_ERROR_TEMPLATE = 'resource "terraform_data" "a" {\n  input = \n}\n'


def _check_failures_explain_themselves(page: Page, server: ServerProcess, env: dict[str, str], tmp_path: Path) -> None:
    template = tmp_path / "broken"
    template.mkdir()
    (template / "main.tf").write_text(FAILING_LATE_TEMPLATE)
    pushed = run_cli("templates", "push", "broken", "-d", str(template), env=env)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    page.goto(f"{server.url}/workspaces/new?template=broken")
    page.fill("input[name=name]", "failing")
    page.click("form.card button[type=submit]")
    page.wait_for_selector("text=about-to-fail", timeout=60_000)
    page.evaluate("window.notReloaded = true")
    cause = page.locator("#job-failure .failure")
    cause.wait_for(timeout=60_000)
    assert page.evaluate("window.notReloaded")
    # The command's own words, not the wrapper Terraform puts around them ("local-exec provisioner error").
    assert "fails on purpose" in cause.inner_text() and "provisioner error" not in cause.inner_text()
    assert page.locator("#job-failure .failure-resource code").inner_text() == "terraform_data.broken[0]"
    assert page.locator("#retry-build").is_visible() and page.locator("#retry-build-debug").is_visible()
    page.screenshot(path=str(ARTIFACTS / "build-failed-live.png"), full_page=True)
    build_url = page.url

    # Opened afresh, the log is scrolled to the first error (200 filler lines above it), which is marked.
    page.goto(build_url)
    anchor = page.locator("#job-failure .failure-link").get_attribute("href") or ""
    line_id = anchor.split("#")[1]
    first_error = page.locator(f"#{line_id}")
    assert first_error.inner_text().split("\n")[-1].strip() == "fails on purpose"
    page.wait_for_function(
        """id => { const log = document.getElementById("log"), line = document.getElementById(id);
                   const box = log.getBoundingClientRect(), at = line.getBoundingClientRect();
                   return log.scrollTop > 0 && at.top >= box.top && at.bottom <= box.bottom; }""",
        arg=line_id,
    )
    assert "first-error" in (first_error.get_attribute("class") or "")
    headers = [h.split("\n")[0] for h in page.locator(".log-stage").all_inner_texts()]
    assert headers == ["Setting up", "Planning infrastructure", "Starting workspace", "Cleaning up"]
    page.screenshot(path=str(ARTIFACTS / "build-failed-opens-at-error.png"), full_page=True)

    # The list says why too, and links to the line.
    page.goto(f"{server.url}/workspaces")
    summary = page.locator('[data-failure="failing"]')
    assert "fails on purpose" in summary.inner_text()
    assert summary.locator("a").get_attribute("href") == f"{build_url.removeprefix(server.url)}#{line_id}"

    # On a phone the cause and its buttons wrap: nothing pushes the page sideways.
    default_size = page.viewport_size
    page.set_viewport_size({"width": 390, "height": 844})
    for path in (build_url, f"{server.url}/workspaces"):
        page.goto(path)
        assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth"), path
    page.goto(build_url)
    page.screenshot(path=str(ARTIFACTS / "build-failed-phone.png"), full_page=True)
    if default_size is not None:
        page.set_viewport_size(default_size)

    # The API says the same.
    token = httpx.post(
        f"{server.url}/api/v2/users/login", json={"email": "alice@example.com", "password": PASSWORD}
    ).json()["session_token"]
    workspaces = httpx.get(f"{server.url}/api/v2/workspaces", headers={"Authorization": f"Bearer {token}"}).json()
    failing = next(item for item in workspaces if item["name"] == "failing")
    failure = failing["latest_build"]["job"]["failure"]
    assert {key: failure[key] for key in ("message", "summary", "resource", "log_line_id")} == {
        "message": "fails on purpose",
        "summary": "local-exec provisioner error",
        "resource": "terraform_data.broken[0]",
        "log_line_id": int(line_id.removeprefix("log-line-")),
    }

    # Retry: the same transition again, a new build that fails the same way.
    page.goto(build_url)
    page.click("#retry-build")
    page.wait_for_url(lambda url: url != build_url and "/builds/" in url)
    page.locator("#job-failure .failure").wait_for(timeout=90_000)
    assert "#2 start" in page.locator("h1").inner_text()

    # The CLI prints the cause and where to look, exits non-zero, and shows no traceback.
    started = run_cli("start", "failing", env=env)
    output = started.stdout + started.stderr
    assert started.returncode != 0, output
    assert "failed: fails on purpose (in terraform_data.broken[0])" in output
    assert f"hint: the error in the log: {server.url}/builds/" in output and "#log-line-" in output
    assert "Traceback" not in output

    # Retry with debug logging: Terraform's debug log in this build's log, at debug level; the cause is unchanged.
    page.goto(output.split("hint: the error in the log: ")[1].split("#")[0])
    page.click("#retry-build-debug")
    page.locator("#job-failure .failure").wait_for(timeout=90_000)
    assert "#4 start" in page.locator("h1").inner_text()
    assert "TF_LOG=debug" in page.locator(".flash").first.inner_text()
    assert page.locator(".log-line.level-debug", has_text="[DEBUG]").count() > 0
    assert "fails on purpose" in page.locator("#job-failure .failure-message").inner_text()
    assert page.locator(".log-line.level-error", has_text="[DEBUG]").count() == 0

    # An import with a syntax error reads as Terraform prints it, not as a parser's words, in the order it ran.
    syntax = tmp_path / "syntax"
    syntax.mkdir()
    (syntax / "main.tf").write_text(SYNTAX_ERROR_TEMPLATE)
    refused = run_cli("templates", "push", "syntax", "-d", str(syntax), env=env)
    output = refused.stdout + refused.stderr
    assert refused.returncode != 0 and "Traceback" not in output
    assert "failed: Invalid expression" in output and "Unexpected token" not in output, output
    version_url = output.split("hint: the error in the log: ")[1].split()[0]
    page.goto(version_url)
    assert "Invalid expression" in page.locator("#job-failure .failure-message").inner_text()
    log_text = page.locator("#log").inner_text()
    assert "on main.tf line 2" in log_text and "Expected the start of an expression" in log_text
    headers = [h.split("\n")[0] for h in page.locator(".log-stage").all_inner_texts()]
    assert headers[0] == "Setting up" and headers[-1] == "Cleaning up"
    page.screenshot(path=str(ARTIFACTS / "import-syntax-error.png"), full_page=True)


# Clones the repository a mutable parameter names, when one is named (replaced, and so cloned again, whenever it
# changes).
DOTFILES_TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
data "coder_parameter" "repo" {
  name         = "repo_url"
  display_name = "Dotfiles repository"
  type         = "string"
  mutable      = true
  default      = ""
}
resource "terraform_data" "dotfiles" {
  count            = data.coder_parameter.repo.value == "" ? 0 : data.coder_workspace.me.start_count
  triggers_replace = data.coder_parameter.repo.value
  provisioner "local-exec" {
    command = "git clone '${data.coder_parameter.repo.value}' $(mktemp -d)/dotfiles"
  }
}
"""


def _check_a_changed_parameter_is_named(page: Page, server: ServerProcess, env: dict[str, str], tmp_path: Path) -> None:
    """Real Terraform, a real `git clone`: the first build names no repository and succeeds (a local one would be
    out of the daemon's sandbox's sight); the repository is changed to one nothing answers at, and the build fails.
    Its summary quotes git, names the change, and offers Change parameters first."""
    template = tmp_path / "dotfiles"
    template.mkdir()
    (template / "main.tf").write_text(DOTFILES_TEMPLATE)
    pushed = run_cli("templates", "push", "dotfiles", "-d", str(template), env=env)
    assert pushed.returncode == 0, pushed.stdout + pushed.stderr

    page.goto(f"{server.url}/workspaces/new?template=dotfiles")
    page.fill("input[name=name]", "dots")
    page.click("form.card button[type=submit]")
    page.wait_for_selector("#job-actions a", timeout=90_000)  # the build ended
    assert page.locator("#job-status").inner_text().strip() == "succeeded", page.locator("#log").inner_text()
    page.click("#job-actions a")  # "Open workspace"
    page.wait_for_selector(".page-head")
    workspace_url = page.url

    unreachable = "http://127.0.0.1:9/nothing.git"
    page.goto(f"{workspace_url}/parameters")
    page.fill('[name="param.repo_url"]', unreachable)
    page.click("#parameters-submit")
    cause = page.locator("#job-failure .failure")
    cause.wait_for(timeout=90_000)  # arrives by the stream's end event: the live page is explained too
    for shown in (page, None):
        if shown is None:
            page.goto(workspace_url)
        message = page.locator("#job-failure .failure-message").inner_text()
        assert message.startswith("fatal: unable to access 'http://127.0.0.1:9/nothing.git/'"), message
        changed = page.locator('#job-failure [data-parameter="repo_url"]').inner_text()
        assert changed == f"You changed Dotfiles repository from empty to {unreachable}"
        primary = page.locator("#job-failure .failure-actions .btn-primary")
        assert primary.count() == 1 and primary.inner_text() == "Change parameters"
        assert page.locator("#retry-build").is_visible()
    page.screenshot(path=str(ARTIFACTS / "failure-change-parameters.png"), full_page=True)
    page.click("#change-parameters")
    page.wait_for_url(f"{workspace_url}/parameters")
