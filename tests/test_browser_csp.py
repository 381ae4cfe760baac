"""Every main page of the dashboard in a real browser (Debian's chromium driven by Playwright) under the strict
Content-Security-Policy: each is served with it, and none reports a violation or a JS error while it works (live
logs over SSE, htmx updates, the web terminal over its WebSocket). Deleting and changing users still ask first, without
inline code. Every page fits a phone's width (390 px) and a desktop's (1400 px) without scrolling sideways or
spilling out of its cards, and signing out stays within reach at both.

One deployment (a real server with built-in daemons, the `local` example whose workspaces run the real agent, and a
slow template whose build is watched live) serves the module.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Dialog, Page, Response, expect

from app.factory import create_app
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from tests.conftest import make_settings
from tests.support import bulk
from tests.support.accessibility import severe_violations, tap_target_problems
from tests.support.browser import ARTIFACTS, browser_page, sign_in_page, watch_for_problems
from tests.support.deployment import Deployment, running_deployment
from tests.support.templates import SLOW_TEMPLATE
from tests.support.waiting import wait_until

WAIT = 60_000  # ms: a build plus an agent starting on a busy machine


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    tmp = tmp_path_factory.mktemp("browser-csp")
    with running_deployment(tmp) as deployment:
        deployment.push_local()
        slow = tmp / "slow"
        slow.mkdir()
        (slow / "main.tf").write_text(SLOW_TEMPLATE)
        pushed = deployment.cli("alice", "templates", "push", "slow", "-d", str(slow))
        assert pushed.returncode == 0, pushed.stdout + pushed.stderr
        yield deployment


@pytest.fixture(scope="module")
def agent(deployment: Deployment) -> dict[str, Any]:
    """Alice's workspace `csp`, started, with its agent connected and ready (the terminal needs one)."""
    deployment.create("alice", "csp")
    return deployment.wait_ready("alice", "csp")


@pytest.fixture
def page() -> Iterator[Page]:
    with browser_page() as opened:
        yield opened


@pytest.fixture
def problems(page: Page) -> Iterator[list[str]]:
    found = watch_for_problems(page.context)
    yield found
    assert found == [], "\n".join(found)


def open_page(page: Page, url: str) -> Response:
    """Load a page and check it came with the dashboard's strict policy."""
    response = page.goto(url)
    assert response is not None and response.status == 200, url
    policy = response.headers.get("content-security-policy", "")
    directives = {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.strip()}
    assert directives.get("script-src") == ["'self'"], f"{url}: {policy!r}"
    assert directives.get("frame-ancestors") == ["'none'"], f"{url}: {policy!r}"
    assert response.headers.get("x-frame-options") == "DENY"
    return response


def sign_in(page: Page, deployment: Deployment, person: str = "alice") -> None:
    open_page(page, f"{deployment.url}/login")
    sign_in_page(page, deployment.url, f"{person}@example.com")
    expect(page).to_have_url(f"{deployment.url}/workspaces")


def test_every_main_page_loads_under_the_policy(
    deployment: Deployment, agent: dict[str, Any], page: Page, problems: list[str]
) -> None:
    sign_in(page, deployment)
    url = deployment.url
    workspace = deployment.workspace("alice", "csp")
    with deployment.api("alice") as api:
        version = api.get("/templates", params={"name": "local"}).json()[0]["active_version_id"]
    pages = {
        "/workspaces": "#workspace-table",
        f"/workspaces/{workspace['id']}": ".agent-card .agent-lifecycle",
        f"/builds/{workspace['latest_build']['id']}": ".log-line",
        "/templates": "input[name=files]",  # the upload form
        "/templates/local": "h1",
        f"/templates/versions/{version}": ".log-line",
        "/workspaces/new?template=local": "input[name=name]",
        "/provisioners": "#provisioners-live",
        "/users": "tr[id^=user-]",
        "/audit": "#audit-log tbody tr",
        "/account": "#session-table",
        "/cli-auth": "form button",
    }
    for path, ready in pages.items():
        open_page(page, url + path)
        expect(page.locator(ready).first).to_be_visible()
    # Live parts keep working: the workspace page's agent panel (SSE, htmx swaps) shows the agent as it is.
    open_page(page, f"{url}/workspaces/{workspace['id']}")
    expect(page.locator(".agent-card .agent-lifecycle")).to_have_text("ready")
    expect(page.locator(".agent-card .agent-status")).to_have_text("connected")
    page.screenshot(path=str(ARTIFACTS / "csp-workspace.png"), full_page=True)


def test_a_build_log_streams_live_under_the_policy(deployment: Deployment, page: Page, problems: list[str]) -> None:
    sign_in(page, deployment)
    jobs = page.context.new_page()  # the jobs page, open in another tab before the build is queued
    open_page(jobs, f"{deployment.url}/provisioners/jobs")
    open_page(page, f"{deployment.url}/workspaces/new?template=slow")
    page.fill("input[name=name]", "watched")
    page.click("form.card button[type=submit]")
    # The first line arrives while Terraform still sleeps: it came over the SSE stream, not with the page.
    page.wait_for_selector("text=first-line-out", timeout=30_000)
    assert page.locator("text=last-line-out").count() == 0
    expect(page.locator("#job-actions a")).to_be_visible(timeout=WAIT)  # the end event replaced the actions
    expect(page.locator("#job-status")).to_have_text("succeeded")
    expect(page.locator("text=last-line-out")).to_have_count(1)
    # The jobs tab showed the build arrive and end without a reload.
    newest = jobs.locator("#all-jobs-table tbody tr").first
    expect(newest).to_contain_text("watched", timeout=WAIT)
    expect(newest.locator(".badge")).to_have_text("succeeded", timeout=WAIT)
    jobs.close()


def test_the_web_terminal_works_under_the_policy(
    deployment: Deployment, agent: dict[str, Any], page: Page, problems: list[str]
) -> None:
    sign_in(page, deployment)
    workspace = deployment.workspace("alice", "csp")
    response = open_page(page, f"{deployment.url}/workspaces/{workspace['id']}/agents/{agent['id']}/terminal")
    # xterm.js draws with <style> elements it adds: this page alone allows inline styles (never inline scripts).
    assert "style-src 'self' 'unsafe-inline'" in response.headers["content-security-policy"]
    expect(page.locator("#terminal-state")).to_have_text("connected", timeout=30_000)  # its WebSocket is open
    expect(page.locator(".xterm-rows")).to_have_text(re.compile(r"\S"), timeout=15_000)  # a prompt
    page.keyboard.type("echo $((6*7))")
    page.keyboard.press("Enter")
    row = page.locator(".xterm-rows > div", has_text=re.compile(r"^\s*42\s*$"))
    expect(row).to_have_count(1, timeout=15_000)
    page.screenshot(path=str(ARTIFACTS / "csp-terminal.png"))


def test_copy_buttons_and_relative_times_work_under_the_policy(
    deployment: Deployment, agent: dict[str, Any], page: Page, problems: list[str]
) -> None:
    page.context.grant_permissions(["clipboard-read", "clipboard-write"], origin=deployment.url)
    sign_in(page, deployment)

    # A new token is brought into view with its Copy button focused; the button copies it and says so.
    open_page(page, f"{deployment.url}/account")
    page.fill("input[name=name]", "copied")
    page.get_by_role("button", name="Create token").click()
    secret = page.locator("#new-token")
    copy = page.get_by_role("button", name="Copy token")
    expect(copy).to_be_focused()
    expect(secret).to_be_in_viewport()
    copy.click()
    expect(copy).to_have_text("Copied")
    expect(page.locator("#copy-status")).to_have_text("Copied to the clipboard.")
    assert page.evaluate("navigator.clipboard.readText()") == secret.inner_text().strip()
    expect(copy).to_have_text("Copy", timeout=5_000)  # back after a moment
    page.screenshot(path=str(ARTIFACTS / "copy-new-token.png"))

    # The token's "created" time counts on without a reload, and keeps the exact time on hover.
    created = page.locator("time[data-ago]").first
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", created.get_attribute("title") or "")
    expect(created).to_have_text("just now")
    created.evaluate("element => element.setAttribute('datetime', new Date(Date.now() - 7260e3).toISOString())")
    page.evaluate("window.slipwayRefreshTimes()")
    expect(created).to_have_text("2 hours ago")

    # Commands in a swapped-in fragment copy too: the agent panel's SSH command. The workspace page swaps its body in
    # whenever the workspace changes (an app turning healthy, say); a swap within the two seconds of feedback shows
    # "Copied" on the button that replaced the one clicked. The page's clock is paused so that "within two seconds"
    # holds however slow the machine is: its timers run only when the test says.
    page.clock.install()
    open_page(page, f"{deployment.url}/workspaces")
    page.get_by_role("link", name="csp", exact=True).click()
    ssh = page.get_by_role("button", name="Copy SSH command")
    expect(ssh).to_be_visible()
    page.clock.pause_at(datetime.now(UTC) + timedelta(seconds=1))
    ssh.click()
    expect(ssh).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == "slipway ssh csp"
    ssh.evaluate("button => button.setAttribute('data-clicked', '')")
    page.evaluate(
        """() => new Promise(resolve => {
            document.addEventListener("htmx:afterSwap", () => resolve(), {once: true});
            htmx.trigger("#workspace-body", "sse:refresh");
        })"""
    )
    page.clock.run_for(100)  # htmx settles the swap, and the new body loads
    expect(page.locator("button[data-clicked]")).to_have_count(0)
    expect(ssh).to_have_text("Copied")
    page.clock.run_for(2_000)
    expect(ssh).to_have_text("Copy")


def test_the_workspace_page_changes_parameters_through_a_real_build(
    deployment: Deployment, page: Page, problems: list[str]
) -> None:
    """The timeline and the parameters by display name; the change form marks every invalid field at once and keeps
    what was typed; valid values start a real build, which Terraform applies."""
    workspace = deployment.create("alice", "params")
    deployment.wait_ready("alice", "params")
    sign_in(page, deployment)
    open_page(page, f"{deployment.url}/workspaces/{workspace['id']}")
    timeline = page.locator("#build-timeline tr.timeline-build")
    expect(timeline).to_have_count(1)
    expect(timeline.first).to_contain_text("#1 start")
    expect(timeline.first.locator("time[data-ago]")).to_have_attribute("title", re.compile(r"\d\d:\d\d:\d\d UTC$"))
    parameters = page.locator("#parameters-card")
    expect(parameters).to_contain_text("Dev server port")
    expect(parameters).to_contain_text("POSIX sh")  # an option by its name
    page.screenshot(path=str(ARTIFACTS / "workspace-page-timeline.png"), full_page=True)
    # Times to come read "in …" too, and the script keeps them current.
    when = timeline.first.locator("time[data-ago]")
    when.evaluate("element => element.setAttribute('datetime', new Date(Date.now() + 7260e3).toISOString())")
    page.evaluate("window.slipwayRefreshTimes()")
    expect(when).to_have_text("in 2 hours")

    page.get_by_role("link", name="Change parameters").click()
    page.get_by_label("Greeting").fill("hi <there>")
    page.get_by_label("Dev server port").fill("80")
    page.get_by_role("button", name="Save and build").click()
    expect(page.locator("#form-errors")).to_contain_text("2 fields need a change")
    for label, typed in (("Greeting", "hi <there>"), ("Dev server port", "80")):
        field = page.get_by_label(label)
        expect(field).to_have_attribute("aria-invalid", "true")
        expect(field).to_have_value(typed)
    expect(page.locator("#param-greeting-error")).to_have_text(re.compile("Use up to 64 letters"))
    expect(page.locator("#param-dev_port-error")).to_have_text(re.compile("less than the minimum 1024"))
    page.screenshot(path=str(ARTIFACTS / "workspace-parameters-errors.png"), full_page=True)
    # The refused form came back as a 400, as it should: not one of the problems this module looks for.
    problems[:] = [problem for problem in problems if not ("/parameters: " in problem and "400" in problem)]

    page.get_by_label("Greeting").fill("hi there")
    page.get_by_label("Dev server port").fill("8081")
    page.get_by_role("button", name="Save and build").click()
    expect(page).to_have_url(re.compile(r"/builds/"))

    # Terraform applied the new values: the Dev server app now points at the new port.
    def rebuilt() -> bool:
        latest = deployment.workspace("alice", "params")["latest_build"]
        return latest["build_number"] == 2 and latest["status"] in ("running", "failed")

    wait_until(rebuilt, timeout=120, what="the build with the new parameters")
    latest = deployment.workspace("alice", "params")["latest_build"]
    assert latest["status"] == "running", latest
    apps = [app for resource in latest["resources"] for agent in resource["agents"] for app in agent["apps"]]
    assert [app["url"] for app in apps if app["slug"] == "dev"] == ["http://localhost:8081"]
    open_page(page, f"{deployment.url}/workspaces/{workspace['id']}")
    expect(timeline).to_have_count(2)
    expect(timeline.first).to_contain_text("#2 start")
    expect(timeline.first).to_contain_text("alice")
    expect(timeline.first.locator(".status-succeeded")).to_be_visible()
    expect(parameters).to_contain_text("hi there")
    expect(parameters).to_contain_text("8081")
    page.screenshot(path=str(ARTIFACTS / "workspace-page-changed.png"), full_page=True)


def test_a_refused_form_puts_focus_on_its_error_summary(
    deployment: Deployment, page: Page, problems: list[str]
) -> None:
    """Issue 41: after a refused submit, focus is on the error summary (not the page's top), and each error's link
    takes focus to its field. At a phone's width, where the summary is most easily scrolled past."""
    page.set_viewport_size({"width": 390, "height": 844})
    sign_in(page, deployment)
    open_page(page, f"{deployment.url}/workspaces/new?template=local")
    page.fill("input[name=name]", "not a name!")
    page.get_by_label("Dev server port").fill("80")
    page.get_by_role("button", name="Create workspace").click()
    summary = page.locator("#form-errors")
    expect(summary).to_be_focused()
    expect(summary).to_contain_text("2 fields need a change")
    page.screenshot(path=str(ARTIFACTS / "error-summary-focused-phone.png"))
    summary.get_by_role("link", name="Dev server port").click()
    expect(page.get_by_label("Dev server port")).to_be_focused()
    summary.get_by_role("link", name="Workspace name").click()
    expect(page.locator("#workspace-name")).to_be_focused()
    # The refused form came back as a 400, as it should: not one of the problems this module looks for.
    problems[:] = [problem for problem in problems if not ("/workspaces" in problem and "400" in problem)]


def answer_dialogs(page: Page, answers: list[bool]) -> list[str]:
    """Answer the next confirm() dialogs in turn (dismiss or accept); returns their messages as they come."""
    asked: list[str] = []

    def answer(dialog: Dialog) -> None:
        asked.append(dialog.message)
        if answers.pop(0):
            dialog.accept()
        else:
            dialog.dismiss()

    page.on("dialog", answer)
    return asked


def test_deleting_still_asks_first(deployment: Deployment, page: Page, problems: list[str], tmp_path: Path) -> None:
    deployment.create("alice", "doomed")
    sign_in(page, deployment)
    workspace = deployment.workspace("alice", "doomed")
    open_page(page, f"{deployment.url}/workspaces/{workspace['id']}")
    asked = answer_dialogs(page, [False, True])

    # A workspace asks for its name on a page of its own; a wrong name deletes nothing.
    page.get_by_role("link", name="Delete").click()
    expect(page.locator("h1")).to_have_text("Delete doomed")
    page.fill("input[name=name]", "doome")
    page.get_by_role("button", name="Delete doomed").click()
    expect(page.locator(".flash-error")).to_contain_text("Type the workspace's name, doomed, to delete it.")
    expect(page.locator(".flash-error")).to_be_focused()  # the refusal, not the page's top
    # The refusal is a 400 on purpose, which Chromium reports on the console: that one is expected.
    refused = [problem for problem in problems if "/delete: Failed to load resource" in problem and "400" in problem]
    assert len(refused) == 1, problems
    problems.remove(refused[0])
    assert deployment.workspace("alice", "doomed")["latest_build"]["transition"] == "start"
    page.fill("input[name=name]", "doomed")
    page.get_by_role("button", name="Delete doomed").click()
    expect(page).to_have_url(f"{deployment.url}/workspaces")
    expect(page.locator(".flash")).to_contain_text("doomed is being deleted.")

    open_page(page, f"{deployment.url}/provisioners")
    page.fill("input[name=name]", "short-lived")
    page.click("#keys form.inline-form button[type=submit]")
    row = page.locator("#key-table tr", has_text="short-lived")
    row.get_by_role("button", name="Delete").click()  # dismissed
    expect(row).to_have_count(1)
    row.get_by_role("button", name="Delete").click()  # accepted
    expect(page.locator("#key-table tr", has_text="short-lived")).to_have_count(0)
    assert asked == ["Delete key short-lived? Daemons using it will stop."] * 2


def test_htmx_updates_and_sign_out_everywhere_work_under_the_policy(
    deployment: Deployment, page: Page, problems: list[str]
) -> None:
    sign_in(page, deployment)
    assert page.context.browser is not None
    other = page.context.browser.new_context().new_page()  # alice in a second browser
    sign_in(other, deployment)
    asked = answer_dialogs(page, [True])

    # Changing a user asks on a page of its own (no dialog), then the users page says what happened.
    open_page(page, f"{deployment.url}/users")
    page.locator("tr", has_text="dave@example.com").get_by_role("button", name="Suspend").click()
    expect(page.locator("#confirm-user-change h2")).to_have_text("Suspend dave?")
    page.get_by_role("button", name="Suspend dave").click()
    expect(page.locator(".flash")).to_contain_text("dave was suspended.")
    expect(page.locator("tr", has_text="dave@example.com").locator(".badge")).to_have_text("suspended")
    page.locator("tr", has_text="dave@example.com").get_by_role("button", name="Activate").click()
    page.get_by_role("button", name="Activate dave").click()
    expect(page.locator(".flash")).to_contain_text("dave was activated.")
    expect(page.locator("tr", has_text="dave@example.com").locator(".badge")).to_have_text("active")
    role = page.locator("tr", has_text="dave@example.com").get_by_label("Role of dave", exact=True)
    role.select_option("template-admin")
    page.get_by_role("button", name="Change the role of dave").click()
    expect(page.locator("#confirm-user-change h2")).to_have_text("Make dave a template admin?")
    page.get_by_role("link", name="Cancel").click()  # nothing changes
    expect(role).to_have_value("member")

    open_page(page, f"{deployment.url}/account")
    expect(page.locator("#session-table")).to_contain_text("this browser")
    page.get_by_role("button", name="Sign out everywhere").click()
    expect(page).to_have_url(f"{deployment.url}/login")
    expect(page.locator(".flash")).to_contain_text("You have signed out everywhere")
    assert len(asked) == 1 and asked[0].startswith("Sign out everywhere?")
    other.goto(f"{deployment.url}/workspaces")
    expect(other).to_have_url(re.compile(r"/login\?next="))
    # That signed out alice's API session too: the tests after this one call the API as her.
    deployment.people["alice"] = deployment._login("alice")


# Every page a person reads in the dashboard, by endpoint, at a phone's width and at a desktop's. What is not a
# page is named below with why; a test walks the URL map so a new page cannot be left out.
NOT_PAGES = {
    "workspaces.home": "redirects to /workspaces",
    "workspaces.build_log_stream": "an event stream",
    "workspaces.status_events": "an event stream",
    "workspaces.new_routing": "an htmx fragment of the new-workspace form",
    "catalog.version_log_stream": "an event stream",
    "catalog.versions_events": "an event stream",
    "catalog.routing_check": "an htmx fragment of the templates page",
    "lifecycle.promotion_check": "an htmx fragment of the version page",
    "agents.log_stream": "an event stream",
    "agents.panel": "an htmx fragment of the workspace page",
    "agents.terminal_current": "JSON the terminal page reads (the agent to reconnect to)",
    "provisioners.events": "an event stream",
    "provisioners.jobs_events": "an event stream",
    "provisioners.live_overview": "an htmx fragment of the provisioners page",
    "provisioners.queue_notice": "an htmx fragment of the build page",
    "timings.job_timings_fragment": "an htmx fragment of the build and import pages (drawn with the page itself)",
    "oidc.start": "redirects to the identity provider",
    "oidc.confirm_link": "needs a pending single sign-on link (tests/test_browser_oidc.py)",
    "externalauth.start": "redirects to the Git provider",
    "externalauth.callback": "redirects back from the Git provider",
    "externalauth.device": "needs a Git provider with device flow configured",
    "auth.setup": "only before the first user; redirects afterwards",
    "health.healthz": "JSON for probes",
    "metrics.metrics": "text for Prometheus",
    "agent_bootstrap.agent_bundle": "an archive",
    "audit.export": "a CSV or NDJSON download",
    "people.accept_invitation": "needs an invitation's link: tests/test_browser_people.py runs axe on it",
    "people.reset_with_link": "needs an emailed reset link (tests/test_people.py)",
    "appearance.stylesheet": "the banners' stylesheet",
}
SIZES = {"phone": (390, 844), "desktop": (1400, 900)}


def dashboard_pages(deployment: Deployment, agent: dict[str, Any]) -> dict[str, str]:
    """endpoint → path of every page, with real ids from the deployment."""
    workspace = deployment.workspace("alice", "csp")
    with deployment.api("alice") as api:
        version = api.get("/templates", params={"name": "local"}).json()[0]["active_version_id"]
        carol = api.get("/users/carol").json()["id"]
    base = f"/workspaces/{workspace['id']}"
    return {
        "auth.login": "/login",  # signed out, before the others
        "people.forgot_password": "/forgot-password",
        "workspaces.index": "/workspaces",
        "workspaces.show": base,
        "workspaces.delete": f"{base}/delete",
        "lifecycle.update": f"{base}/update",
        "workspaces.change_parameters": f"{base}/parameters",
        "agents.terminal": f"{base}/agents/{agent['id']}/terminal",
        "workspaces.build": f"/builds/{workspace['latest_build']['id']}",
        "workspaces.new": "/workspaces/new?template=local",
        "lifecycle.upcoming": "/workspaces/lifecycle",
        "catalog.index": "/templates",
        "catalog.show": "/templates/local",
        "lifecycle.template_settings": "/templates/local/settings",
        "catalog.source": "/templates/local/source",
        "catalog.diff": "/templates/slow/diff",
        "catalog.delete": "/templates/local/delete",
        "template_workspaces.confirm_update_all": "/templates/local/update-all",
        "catalog.version": f"/templates/versions/{version}",
        "provisioners.index": "/provisioners",
        "provisioners.jobs": "/provisioners/jobs",
        "externalauth.overview": "/external-auth",
        "health_page.page": "/health",
        "users.index": "/users",
        "people.invitations_page": "/users/invitations",
        "people.reset_password": f"/users/{carol}/password",
        "auth.change_password": "/password/change",
        "audit.index": "/audit",
        "users.account": "/account",
        "oidc.cli_auth": "/cli-auth",
        "groups.index": "/groups",
        "groups.show": f"/groups/{DEFAULT_ORGANIZATION_ID}",  # Everyone: its id is the organisation's
        "organizations.index": "/organizations",
        "organizations.show": "/organizations/default",
        "idpsync.page": "/admin/idp-sync",
        "template_acl.show": "/templates/local/permissions",
        "connectionlog.index": "/connectionlog",
        "insights.index": "/insights",
        "appearance.page": "/deployment/appearance",
        "apidocs.page": "/docs/api",
    }


def page_endpoints() -> set[str]:
    """Endpoints of the dashboard's GET routes (not the JSON API, the apps proxy or static files)."""
    settings = make_settings(Path(tempfile.gettempdir()), "sqlite://", "unix:///nonexistent")
    return {
        rule.endpoint
        for rule in create_app(settings).url_map.iter_rules()
        if "GET" in (rule.methods or set())
        and not rule.websocket
        and rule.endpoint != "static"
        and not rule.rule.startswith(("/api/", "/@"))
    }


# The outermost elements that stick out of the window, to say what pushed the page sideways when one does.
TOO_WIDE = """() => [...document.querySelectorAll("body *")]
  .filter((element) => element.getBoundingClientRect().right > window.innerWidth + 0.5)
  .filter((element) => element.parentElement.getBoundingClientRect().right <= window.innerWidth + 0.5)
  .slice(0, 5)
  .map((element) => element.tagName.toLowerCase() + (element.id ? "#" + element.id : "")
    + (typeof element.className === "string" && element.className ? "." + element.className.replace(/ +/g, ".") : "")
    + ` right=${Math.round(element.getBoundingClientRect().right)}`)"""


# Cards whose content sticks out of them (over the next card, as the template page's versions once did), by heading.
SPILLED_CARDS = """() => [...document.querySelectorAll(".card")]
  .filter((card) => card.scrollWidth > card.clientWidth + 1)
  .map((card) => (card.querySelector("h2")?.textContent || card.id || "a card").trim())"""


def overflow(page: Page) -> str:
    """'' when the page fits its window and every card holds its content; else what sticks out."""
    found = []
    width, window = page.evaluate("[document.documentElement.scrollWidth, window.innerWidth]")
    if width > window:
        found.append(f"{width}px wide in a {window}px window: {', '.join(page.evaluate(TOO_WIDE))}")
    if spilled := page.evaluate(SPILLED_CARDS):
        found.append(f"content spills out of {', '.join(spilled)}")
    return "; ".join(found)


def test_every_dashboard_page_is_visited_at_every_size(deployment: Deployment, agent: dict[str, Any]) -> None:
    assert set(dashboard_pages(deployment, agent)) == page_endpoints() - set(NOT_PAGES)


def skip_link_problem(page: Page) -> str:
    """'' when Tab from the top of the page reaches the skip link first, shown, and Enter on it moves focus to the
    page's <main>. Pages that focus a field as they load (sign-in, a typed delete, the terminal) start past it: their
    first stop in the document's order is checked by tap_target_problems instead."""
    if not page.evaluate("document.activeElement === document.body"):
        return ""
    page.keyboard.press("Tab")
    focused = page.evaluate(
        "() => { const box = document.activeElement.getBoundingClientRect();"
        " return [document.activeElement.className, box.top >= 0 && box.bottom <= window.innerHeight]; }"
    )
    if focused != ["skip-link", True]:
        return f"the first Tab stop is {focused[0]!r}, in view: {focused[1]}; not the skip link, shown"
    page.keyboard.press("Enter")
    if not page.evaluate("document.activeElement === document.querySelector('main#main')"):
        return "the skip link does not move focus to <main>"
    return ""


@pytest.mark.parametrize("size", SIZES)
def test_no_page_scrolls_sideways(
    deployment: Deployment, agent: dict[str, Any], page: Page, problems: list[str], size: str
) -> None:
    """At a phone's width axe-core checks each page too (the collapsed menu, the stacked tables): the desktop's
    width is checked by test_every_page_passes_axe, in both themes and for a member as well. At the phone's width, in
    the same visit, every tap target measures at least 24 by 24 px, no primary action or status badge is cut off, and
    the skip link is the first Tab stop and takes focus to the page's main content."""
    width, height = SIZES[size]
    page.set_viewport_size({"width": width, "height": height})
    wide: list[str] = []
    for endpoint, path in dashboard_pages(deployment, agent).items():
        if endpoint == "workspaces.index":
            sign_in(page, deployment)
        open_page(page, deployment.url + path)
        page.wait_for_load_state("networkidle")  # htmx fragments (routing, promotion check) are in
        if problem := overflow(page):
            wide.append(f"{path}: {problem}")
        if size == "phone":
            wide += [f"{path} (axe at {width} px): {violation}" for violation in severe_violations(page)]
            wide += [f"{path} (at {width} px): {problem}" for problem in tap_target_problems(page)]
        page.screenshot(path=str(ARTIFACTS / f"screens-{size}-{endpoint}.png"), full_page=True)
        if size == "phone" and (problem := skip_link_problem(page)):
            wide.append(f"{path}: {problem}")
    # The users page's confirmation comes from a form, not a link.
    open_page(page, f"{deployment.url}/users")
    page.locator("tr", has_text="carol@example.com").get_by_role("button", name="Suspend").click()
    expect(page.locator("#confirm-user-change h2")).to_have_text("Suspend carol?")
    if problem := overflow(page):
        wide.append(f"users confirm page: {problem}")
    page.screenshot(path=str(ARTIFACTS / f"screens-{size}-users.confirm.png"), full_page=True)
    # Signing out stays within reach at every width.
    open_page(page, f"{deployment.url}/workspaces")
    sign_out = page.get_by_role("button", name="Sign out", exact=True)
    if not sign_out.is_visible():
        page.locator(".nav-toggle").click()
        expect(page.locator(".nav-toggle")).to_have_attribute("aria-expanded", "true")
        page.screenshot(path=str(ARTIFACTS / f"screens-{size}-menu.png"))
    if sign_out.evaluate("(button) => button.getBoundingClientRect().right > window.innerWidth"):
        wide.append("Sign out is off the screen")
    assert wide == [], "\n".join(wide)


def test_a_dark_screen_gets_the_dark_theme(
    deployment: Deployment, agent: dict[str, Any], page: Page, problems: list[str]
) -> None:
    page.emulate_media(color_scheme="dark")
    sign_in(page, deployment)
    workspace = deployment.workspace("alice", "csp")
    open_page(page, f"{deployment.url}/workspaces/{workspace['id']}")
    expect(page.locator("body")).to_have_css("background-color", "rgb(13, 17, 23)")
    expect(page.locator(".card").first).to_have_css("color", "rgb(230, 237, 243)")
    page.screenshot(path=str(ARTIFACTS / "screens-dark-workspace.png"), full_page=True)
    page.emulate_media(color_scheme="light")
    expect(page.locator("body")).to_have_css("background-color", "rgb(246, 247, 249)")


TABS_TEMPLATE = """
terraform {
  required_providers {
    coder = { source = "coder/coder" }
  }
}
data "coder_workspace" "me" {}
resource "terraform_data" "home" {
  count = data.coder_workspace.me.start_count
}
"""


def upload_and_see_it_published(page: Page, deployment: Deployment, name: str, main_tf: str) -> None:
    """The upload form with "Publish when the import succeeds" ticked (its default): the import's page says it is
    published as the import ends, without a reload or a Continue step."""
    open_page(page, f"{deployment.url}/templates")
    page.locator("input[name=name]").fill(name)
    page.set_input_files(
        "input[name=files]", files=[{"name": "main.tf", "mimeType": "text/plain", "buffer": main_tf.encode()}]
    )
    expect(page.locator("#upload-publish")).to_be_checked()
    page.get_by_role("button", name="Upload and import").click()
    expect(page.locator("#job-actions")).to_contain_text("Published: this is the active version of", timeout=WAIT)


def test_template_tabs_work_under_the_policy(deployment: Deployment, page: Page, problems: list[str]) -> None:
    """Publishing on import, the Source tab (highlighted), Compare versions, and Settings: deprecate, then delete."""
    sign_in(page, deployment)
    upload_and_see_it_published(page, deployment, "tabs", TABS_TEMPLATE)
    upload_and_see_it_published(page, deployment, "tabs", TABS_TEMPLATE + "# second version\n")

    open_page(page, f"{deployment.url}/templates/tabs")
    page.locator("#tab-source").click()
    expect(page.locator(".source-code .kr", has_text="resource")).to_be_visible()  # highlighted by class
    expect(page.locator("#source-files")).to_contain_text("main.tf")
    page.wait_for_load_state()  # styled before it is measured
    page.set_viewport_size({"width": 390, "height": 844})
    assert overflow(page) == ""
    page.screenshot(path=str(ARTIFACTS / "template-source-phone.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 900})
    page.screenshot(path=str(ARTIFACTS / "template-source.png"), full_page=True)

    page.locator("#tab-diff").click()
    expect(page.locator(".diff-add").last).to_have_text("+# second version")
    # The lines are in the page before its stylesheet may be (a click waits for less than a load): measured unstyled,
    # the diff's lines run on as one (seen on a busy machine).
    page.wait_for_load_state()
    page.set_viewport_size({"width": 390, "height": 844})
    assert overflow(page) == ""
    page.screenshot(path=str(ARTIFACTS / "template-diff-phone.png"), full_page=True)
    page.set_viewport_size({"width": 1400, "height": 900})

    page.locator("#template-settings").click()
    page.locator("#deprecation_message").fill("Use slow instead.")
    page.get_by_role("button", name="Save settings").click()
    expect(page.locator("#template-deprecated")).to_contain_text("Use slow instead.")
    page.screenshot(path=str(ARTIFACTS / "template-deprecated.png"), full_page=True)
    page.locator("#template-settings").click()
    page.locator("#delete-template-link").click()
    page.locator("#delete-template input[name=name]").fill("tabs")
    page.get_by_role("button", name="Delete tabs").click()
    expect(page).to_have_url(f"{deployment.url}/templates")
    expect(page.locator(".flash-success")).to_contain_text("Template tabs deleted.")


# The pages a member opens, with her own workspace: the rest are an owner's or a template admin's.
MEMBER_PAGES = {
    "workspaces.index", "workspaces.show", "workspaces.delete", "lifecycle.update", "agents.terminal",
    "workspaces.build", "workspaces.new", "catalog.index", "catalog.show", "users.account", "oidc.cli_auth",
    "groups.index", "groups.show",  # her own groups (Everyone among them)
    "organizations.index", "organizations.show",  # her own organisations (the default one among them)
    "auth.change_password",  # her own password
    "apidocs.page",  # the API reference (public)
}  # fmt: skip


@pytest.fixture(scope="module")
def member_agent(deployment: Deployment) -> dict[str, Any]:
    """carol's (a member's) workspace `mine`, started, with its agent ready."""
    deployment.create("carol", "mine")
    return deployment.wait_ready("carol", "mine")


# Pages for people who are signed out, which anyone may open.
SIGNED_OUT_PAGES = {"auth.login", "people.forgot_password"}


def member_pages(deployment: Deployment, member_agent: dict[str, Any]) -> dict[str, str]:
    """endpoint → path of every page a member may open, with her own workspace's ids."""
    workspace = deployment.workspace("carol", "mine")
    base = f"/workspaces/{workspace['id']}"
    return {
        "auth.login": "/login",
        "workspaces.index": "/workspaces",
        "workspaces.show": base,
        "workspaces.delete": f"{base}/delete",
        "lifecycle.update": f"{base}/update",
        "agents.terminal": f"{base}/agents/{member_agent['id']}/terminal",
        "workspaces.build": f"/builds/{workspace['latest_build']['id']}",
        "workspaces.new": "/workspaces/new?template=local",
        "catalog.index": "/templates",
        "catalog.show": "/templates/local",
        "users.account": "/account",
        "oidc.cli_auth": "/cli-auth",
        "groups.index": "/groups",
        "groups.show": f"/groups/{DEFAULT_ORGANIZATION_ID}",
        "organizations.index": "/organizations",
        "organizations.show": "/organizations/default",
        "auth.change_password": "/password/change",
        "apidocs.page": "/docs/api",
    }


def test_a_member_is_refused_the_pages_not_on_her_list(
    deployment: Deployment, agent: dict[str, Any], member_agent: dict[str, Any], page: Page
) -> None:
    """So the member's accessibility loop below covers every page she can open (alice's workspace pages included)."""
    assert set(member_pages(deployment, member_agent)) == MEMBER_PAGES | {"auth.login"}
    sign_in(page, deployment, "carol")
    for endpoint, path in dashboard_pages(deployment, agent).items():
        if (
            endpoint
            in MEMBER_PAGES
            - {"workspaces.show", "workspaces.delete", "lifecycle.update", "agents.terminal", "workspaces.build"}
            or endpoint in SIGNED_OUT_PAGES
        ):
            continue
        response = page.goto(deployment.url + path)
        assert response is not None and response.status in (403, 404), f"{path}: {response and response.status}"


@pytest.mark.parametrize("person", ["alice", "carol"])
def test_every_page_passes_axe(
    deployment: Deployment,
    agent: dict[str, Any],
    member_agent: dict[str, Any],
    page: Page,
    problems: list[str],
    person: str,
) -> None:
    """axe-core finds no serious or critical violation on any page an owner (alice) or a member (carol) opens, in
    the light theme and the dark one (contrast differs)."""
    pages = dashboard_pages(deployment, agent) if person == "alice" else member_pages(deployment, member_agent)
    found: list[str] = []
    for endpoint, path in pages.items():
        if endpoint == "workspaces.index":
            sign_in(page, deployment, person)
        open_page(page, deployment.url + path)
        page.wait_for_load_state("networkidle")  # htmx fragments are in
        for scheme in ("light", "dark"):
            page.emulate_media(color_scheme=scheme)
            found += [f"{path} ({scheme}): {violation}" for violation in severe_violations(page)]
        page.emulate_media(color_scheme="light")
    assert found == [], "\n".join(found)


def tab_to(page: Page, selector: str, most: int = 60) -> int:
    """Press Tab until the element matching ``selector`` has focus; the number of presses it took."""
    for presses in range(1, most + 1):
        page.keyboard.press("Tab")
        if page.evaluate("(selector) => document.activeElement?.matches(selector) ?? false", selector):
            return presses
    raise AssertionError(f"Tab never reached {selector} in {most} presses")


FOCUS_RING = """() => {
  const style = getComputedStyle(document.activeElement);
  return [style.outlineStyle, parseFloat(style.outlineWidth)];
}"""


def test_the_log_box_and_the_menu_work_from_the_keyboard(
    deployment: Deployment, agent: dict[str, Any], page: Page, problems: list[str]
) -> None:
    page.set_viewport_size({"width": 1400, "height": 600})  # the build's log is taller than its box
    sign_in(page, deployment)
    workspace = deployment.workspace("alice", "csp")
    open_page(page, f"{deployment.url}/builds/{workspace['latest_build']['id']}")
    log = page.locator("#log")
    expect(log).to_have_attribute("aria-label", "Log")
    assert log.evaluate("(box) => box.scrollHeight > box.clientHeight"), "the log must scroll for this test"
    log.evaluate("(box) => { box.scrollTop = 0; }")
    tab_to(page, "#log")
    outline_style, outline_width = page.evaluate(FOCUS_RING)
    assert outline_style == "solid" and outline_width >= 2, (outline_style, outline_width)
    page.screenshot(path=str(ARTIFACTS / "keyboard-log-focused.png"))
    page.keyboard.press("PageDown")
    page.wait_for_function("() => document.querySelector('#log').scrollTop > 0")
    page.keyboard.press("End")
    page.wait_for_function("() => { const box = document.querySelector('#log');"
                           " return box.scrollTop + box.clientHeight >= box.scrollHeight - 2; }")  # fmt: skip

    # Every link and button on the way shows where focus is: the first ones on the page.
    open_page(page, f"{deployment.url}/workspaces")
    for _ in range(4):
        page.keyboard.press("Tab")
        outline_style, outline_width = page.evaluate(FOCUS_RING)
        tag = page.evaluate("document.activeElement.tagName")
        assert outline_style == "solid" and outline_width >= 2, (tag, outline_style, outline_width)
    tab_to(page, "input[name=q]")  # a field too, in a colour that stands out (not the pale field tint)
    ring = page.evaluate(
        "() => ['outlineColor', 'outlineWidth'].map((key) => getComputedStyle(document.activeElement)[key])"
    )
    assert ring == ["rgb(31, 79, 216)", "3px"], ring
    page.screenshot(path=str(ARTIFACTS / "keyboard-field-focused.png"))

    # On a phone the navigation sits behind the Menu button: Tab reaches it, Enter opens it, Tab goes on into it.
    page.set_viewport_size({"width": 390, "height": 844})
    open_page(page, f"{deployment.url}/workspaces")
    toggle = page.locator(".nav-toggle")
    expect(page.locator(".mainnav")).to_be_hidden()
    tab_to(page, ".nav-toggle")
    page.keyboard.press("Enter")
    expect(toggle).to_have_attribute("aria-expanded", "true")
    expect(page.locator(".mainnav")).to_be_visible()
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.closest('#topbar-menu') !== null")
    tab_to(page, ".mainnav a[href$='/templates']")
    page.screenshot(path=str(ARTIFACTS / "keyboard-menu-open.png"))
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{deployment.url}/templates")


# Keep this test last in the module: it leaves 250 workspaces behind for any test after it.
def test_250_workspaces_page_filter_and_sort_in_the_browser(
    deployment: Deployment, agent: dict[str, Any], page: Page, problems: list[str]
) -> None:
    """Made straight in the database (copies of alice's `csp`, each with its build): 250 through the API would be
    250 Terraform runs."""
    data = deployment.tmp / "data"
    server_key = (data / "secret_key").read_text().strip()  # what the stored secrets are encrypted with
    settings = make_settings(data, f"sqlite:///{data / 'slipway.db'}", "unix:///nonexistent", secret_key=server_key)
    with deployment.api("alice") as alice:
        existing = int(alice.get("/workspaces", params={"limit": 1}).headers["X-Total-Count"])
        bulk.add_workspaces(create_app(settings), deployment.workspace("alice", "csp")["id"], 250 - existing)
        names = sorted(item["name"] for item in alice.get("/workspaces", params={"limit": 250}).json())
    assert len(names) == 250

    sign_in(page, deployment)
    open_page(page, f"{deployment.url}/workspaces")
    rows, pager = page.locator("#workspace-table tbody tr"), page.locator(".pager")
    expect(pager).to_contain_text("1–25 of 250")
    expect(rows).to_have_count(25)
    pager.get_by_role("link", name="Next").click()
    expect(page).to_have_url(re.compile(r"page=2"))
    expect(pager).to_contain_text("26–50 of 250")
    expect(rows.first.locator("strong")).to_have_text(names[25])
    open_page(page, f"{deployment.url}/workspaces?page=10")
    expect(pager).to_contain_text("226–250 of 250")
    expect(pager.get_by_role("link", name="Next")).to_have_count(0)

    # A filter, then a sort by the column header, which keeps the filter.
    page.fill("input[name=q]", "name:w01")
    page.locator("#workspace-search").get_by_role("button", name="Filter").click()
    matching = [name for name in names if "w01" in name]
    expect(pager).to_contain_text(f"1–25 of {len(matching)}")
    page.locator("thead").get_by_role("link", name="Workspace").click()  # sorted by name already: this turns it
    expect(page).to_have_url(re.compile(r"sort=-name"))
    expect(rows.first.locator("strong")).to_have_text(matching[-1])
    expect(page.locator("input[name=q]")).to_have_value("name:w01")
    page.screenshot(path=str(ARTIFACTS / "workspaces-250-filtered-sorted.png"))

    page.set_viewport_size({"width": 390, "height": 844})  # the pager fits a phone too
    open_page(page, f"{deployment.url}/workspaces?page=2")
    assert page.evaluate("document.documentElement.scrollWidth <= window.innerWidth")
    page.screenshot(path=str(ARTIFACTS / "workspaces-250-phone.png"), full_page=True)


def test_a_banner_an_owner_sets_is_seen_by_a_member(deployment: Deployment, page: Page, problems: list[str]) -> None:
    """Issue 41: the owner's form saves a service banner and an announcement; a member sees both under the policy,
    coloured by the generated stylesheet, and axe finds their contrast fine. The banners are removed afterwards."""
    sign_in(page, deployment)
    open_page(page, f"{deployment.url}/deployment/appearance")
    page.check("input[name=service_enabled]")
    page.fill("textarea[name=service_message]", "Maintenance tonight at 22:00 UTC")
    page.fill("input[name=service_color]", "#ffcc00")
    page.check("input[name=announcement-0-enabled]")
    page.fill("textarea[name=announcement-0-message]", "New GPU template")
    page.click("#appearance-form button[type=submit]")
    expect(page.locator(".flash-success")).to_have_text("Saved the appearance settings.")
    member = page.context.browser.new_context().new_page()  # type: ignore[union-attr]
    member_problems = watch_for_problems(member.context)
    try:
        sign_in(member, deployment, "carol")
        service = member.locator(".site-banner-service")
        expect(service).to_have_text("Maintenance tonight at 22:00 UTC")
        expect(member.locator(".site-banner-announcement-0")).to_have_text("New GPU template")
        # The colours arrived through the stylesheet the policy allows (an inline style would have been refused).
        expect(service).to_have_css("background-color", "rgb(255, 204, 0)")
        expect(service).to_have_css("color", "rgb(0, 0, 0)")
        expect(member.locator("#inbox-link")).to_have_attribute("aria-label", re.compile(r"^Inbox, (none|\d+) unread$"))
        for scheme in ("light", "dark"):
            member.emulate_media(color_scheme=scheme)
            assert severe_violations(member) == [], scheme
        member.screenshot(path=str(ARTIFACTS / "appearance-banner-member.png"))
        assert member_problems == [], "\n".join(member_problems)
    finally:
        with deployment.api("alice") as api:
            assert api.put("/appearance", json={}).status_code == 200
