"""Workspace agents as a person meets them in a real browser (Debian's chromium driven by Playwright): the agent
panel of the workspace page coming alive, a stop seen from the page, the web terminal, and who may see what.

One deployment (a real server with built-in daemons and the `local` example, whose workspaces run the real agent)
serves the module; every test stops the workspaces it starts. A build's timings (API and waterfall) are checked on
the same deployment: its builds are real (daemon, Terraform, agent).
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.support.accessibility import severe_violations
from tests.support.browser import ARTIFACTS, browser_page, sign_in_page, watch_for_problems
from tests.support.deployment import Deployment, running_deployment
from tests.support.server import SLIPWAY

WAIT = 60_000  # ms: a build plus an agent starting on a busy machine


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with running_deployment(tmp_path_factory.mktemp("browser-agents")) as deployment:
        deployment.push_local()
        yield deployment


@pytest.fixture
def page() -> Iterator[Page]:
    with browser_page() as opened:
        yield opened


def sign_in(page: Page, deployment: Deployment, person: str) -> None:
    sign_in_page(page, deployment.url, f"{person}@example.com")
    expect(page).to_have_url(f"{deployment.url}/workspaces")


def stop_if_started(deployment: Deployment, name: str) -> None:
    """Stop alice's workspace `name` unless it is stopped already (or was never made)."""
    with deployment.api("alice") as api:
        found = api.get("/workspaces", params={"owner": "me", "name": name}).json()
    if found and found[0]["latest_build"]["transition"] == "start":
        stopped = deployment.cli("alice", "stop", name)
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr


@contextmanager
def started(deployment: Deployment, name: str) -> Iterator[dict[str, Any]]:
    """Alice's workspace `name`, started and its agent ready; stopped on the way out."""
    try:
        deployment.create("alice", name)
        yield deployment.wait_ready("alice", name)
    finally:
        stop_if_started(deployment, name)


def wait_for_workspace(deployment: Deployment, name: str, timeout: float = 30) -> str:
    """The id of alice's workspace `name` as soon as it exists (its first build has only just been queued)."""
    deadline = time.monotonic() + timeout
    with deployment.api("alice") as api:
        while time.monotonic() < deadline:
            found = api.get("/workspaces", params={"owner": "me", "name": name}).json()
            if found:
                return str(found[0]["id"])
            time.sleep(0.05)
    raise AssertionError(f"workspace {name} was never created")


def test_the_agent_panel_comes_alive_without_a_reload(deployment: Deployment, page: Page) -> None:
    sign_in(page, deployment, "alice")
    command = [SLIPWAY, "create", "live", "-t", "local", "-p", "greeting=hi from the browser"]
    env = deployment.cli_env("alice")
    try:
        with subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as create:
            try:
                page.goto(f"{deployment.url}/workspaces/{wait_for_workspace(deployment, 'live')}")
                # Opened while the first build runs: no agent has reported ready yet.
                assert "ready" not in page.locator(".agent-lifecycle").all_inner_texts()
                page.evaluate("window.notReloaded = true")

                card = page.locator(".agent-card")
                expect(card.locator(".agent-lifecycle")).to_have_text("ready", timeout=WAIT)
                expect(card.locator(".agent-status")).to_have_text("connected")
                expect(card.get_by_role("link", name="Terminal")).to_be_visible()
                line = card.locator(".agent-log .log-line", has_text="is up: wrote 'hi from the browser'")
                expect(line).to_have_count(1, timeout=30_000)
                expect(line.locator(".log-source")).to_have_text("Startup Script")
                expect(card.locator(".log-empty")).to_have_count(0)
                names = card.locator(".agent-metadata tr td:first-child")
                expect(names).to_have_text(["Load average", "Workspace size"])
                values = card.locator(".agent-metadata tr td:nth-child(2)")
                expect(values).to_have_text([re.compile(r"^\d+\.\d+ \d+\.\d+ \d+\.\d+$"), re.compile(r"^\d")])
                expect(page.locator(".page-head .status-running")).to_be_visible()
                assert page.evaluate("window.notReloaded")
            finally:
                output, _ = create.communicate(timeout=120)
        assert create.returncode == 0, output

        agent = deployment.agent("alice", "live")
        expect(page.locator(f"#agent-{agent['id']}")).to_be_visible()
        expect(page.locator(f"#agent-{agent['id']}-log .log-line")).to_have_count(1)
        expect(page.locator(f"#agent-{agent['id']}-log-empty")).to_have_count(0)
        expect(card).to_contain_text(str(deployment.directory("alice", "live")))
        page.screenshot(path=str(ARTIFACTS / "agent-panel-live.png"), full_page=True)
    finally:
        stop_if_started(deployment, "live")


# Every change of the workspace page's status badge and agent panel, in order, kept in the page itself.
RECORD_CHANGES = """() => {
  window.seen = [];
  const note = () => {
    const status = document.querySelector(".page-head .badge")?.textContent.trim();
    const agents = document.querySelectorAll(".agent-card").length;
    const lifecycle = document.querySelector(".agent-card .agent-lifecycle")?.textContent.trim() || null;
    const last = window.seen[window.seen.length - 1];
    if (!last || last.status !== status || last.agents !== agents || last.lifecycle !== lifecycle) {
      window.seen.push({ status, agents, lifecycle });
    }
    if (document.querySelector(".agent-log")?.textContent.includes("is stopping: noted in")) window.sawShutdown = true;
  };
  new MutationObserver(note).observe(document.body, { subtree: true, childList: true, characterData: true });
  note();
}"""


def test_stop_from_the_page_shows_the_shutdown_then_the_workspace_stopped(deployment: Deployment, page: Page) -> None:
    with started(deployment, "stopper"):
        sign_in(page, deployment, "alice")
        workspace_url = f"{deployment.url}/workspaces/{deployment.workspace('alice', 'stopper')['id']}"
        watcher = page.context.new_page()  # a second tab stays on the workspace page while the first stops it
        for opened in (page, watcher):
            opened.goto(workspace_url)
            expect(opened.locator(".agent-card .agent-lifecycle")).to_have_text("ready")
        watcher.evaluate(RECORD_CHANGES)
        watcher.evaluate("window.notReloaded = true")

        page.get_by_role("button", name="Stop").click()
        expect(page.locator("h1")).to_have_text("stopper · build #2 stop")
        expect(page.locator("#job-actions a")).to_have_text("Open workspace", timeout=WAIT)
        expect(page.locator("#job-status")).to_have_text("succeeded")  # the build's own status

        # The tab left open follows without a reload: while the stop runs, the outgoing agent's panel stays and
        # shows it shutting down with its shutdown script's output; once stopped, the panel goes.
        expect(watcher.locator(".page-head .status-stopped")).to_be_visible(timeout=WAIT)
        first, *after = seen = watcher.evaluate("window.seen")
        assert first == {"status": "running", "agents": 1, "lifecycle": "ready"}
        # shutting_down lasts as long as the (tiny) shutdown script: the page may only catch "off".
        assert any(
            change["status"] == "stopping" and change["agents"] == 1 and change["lifecycle"] in ("shutting_down", "off")
            for change in after
        ), seen
        assert after[-1] == {"status": "stopped", "agents": 0, "lifecycle": None}, seen
        assert watcher.evaluate("window.sawShutdown"), seen
        assert watcher.evaluate("window.notReloaded")
        page.click("#job-actions a")
        expect(page).to_have_url(workspace_url)
        for opened in (page, watcher):
            expect(opened.locator(".page-head .status-stopped")).to_be_visible()
            expect(opened.locator(".agent-card")).to_have_count(0)
            expect(opened.get_by_role("button", name="Start")).to_be_enabled()
            expect(opened.get_by_role("button", name="Stop")).to_have_count(0)
            expect(opened.locator("#build-timeline tr.timeline-build").first).to_contain_text("#2 stop")
        assert "stopped at" in (deployment.directory("alice", "stopper") / "shutdown.log").read_text()
        page.screenshot(path=str(ARTIFACTS / "agent-workspace-stopped.png"), full_page=True)


def terminal_row(page: Page, text: str) -> Any:
    """The terminal's rows (xterm's DOM renderer draws one div per row) that hold exactly `text`."""
    return page.locator(".xterm-rows > div", has_text=re.compile(rf"^\s*{re.escape(text)}\s*$"))


def test_the_web_terminal_runs_a_shell_in_the_workspace(deployment: Deployment, page: Page) -> None:
    with started(deployment, "term"):
        sign_in(page, deployment, "alice")
        page.goto(f"{deployment.url}/workspaces/{deployment.workspace('alice', 'term')['id']}")
        with page.context.expect_page() as opened:
            page.locator(".agent-card").get_by_role("link", name="Terminal").click()
        terminal = opened.value
        expect(terminal).to_have_title(re.compile(r"^Terminal · term"))
        expect(terminal.locator("#terminal-state")).to_have_text("connected", timeout=30_000)
        expect(terminal.get_by_role("button", name="Reconnect")).to_be_hidden()
        expect(terminal.locator(".xterm-rows")).to_have_text(re.compile(r"\S"), timeout=15_000)  # a prompt

        terminal.keyboard.type("echo $((6*7))")
        terminal.keyboard.press("Enter")
        expect(terminal_row(terminal, "42")).to_have_count(1, timeout=15_000)
        terminal.keyboard.type("pwd")
        terminal.keyboard.press("Enter")
        expect(terminal_row(terminal, str(deployment.directory("alice", "term")))).to_have_count(1, timeout=15_000)
        terminal.screenshot(path=str(ARTIFACTS / "agent-terminal.png"))

        terminal.keyboard.type("exit")
        terminal.keyboard.press("Enter")
        expect(terminal.locator("#terminal-state")).to_have_text("exited", timeout=15_000)
        expect(terminal_row(terminal, "[the shell exited with status 0]")).to_have_count(1)
        expect(terminal.get_by_role("button", name="New session")).to_be_visible()
        terminal.screenshot(path=str(ARTIFACTS / "agent-terminal-exited.png"))


def test_the_web_terminal_reattaches_after_the_page_is_closed(deployment: Deployment, page: Page) -> None:
    """The session outlives its tab (Coder's reconnecting PTY): the page's address names it, and the same
    address in a new page replays its output and types into the same shell."""
    with started(deployment, "reattach") as agent:
        sign_in(page, deployment, "alice")
        workspace_id = deployment.workspace("alice", "reattach")["id"]
        page.goto(f"{deployment.url}/workspaces/{workspace_id}/agents/{agent['id']}/terminal")
        expect(page.locator("#terminal-state")).to_have_text("connected", timeout=30_000)
        expect(page).to_have_url(re.compile(r"\?session=[0-9a-f-]{36}$"))  # the id, kept in the address
        address = page.url
        page.keyboard.type("MARK=kept-$((40+2)); echo before-$MARK")
        page.keyboard.press("Enter")
        expect(terminal_row(page, "before-kept-42")).to_have_count(1, timeout=15_000)
        context = page.context
        page.close()  # the tab goes; the shell stays

        reopened = context.new_page()
        reopened.goto(address)
        expect(reopened.locator("#terminal-state")).to_have_text("connected", timeout=30_000)
        expect(terminal_row(reopened, "before-kept-42")).to_have_count(1, timeout=15_000)  # replayed
        reopened.keyboard.type("echo after-$MARK")
        reopened.keyboard.press("Enter")
        expect(terminal_row(reopened, "after-kept-42")).to_have_count(1, timeout=15_000)  # the same shell
        reopened.screenshot(path=str(ARTIFACTS / "agent-terminal-reattached.png"))

        reopened.keyboard.type("exit")
        reopened.keyboard.press("Enter")
        expect(reopened.locator("#terminal-state")).to_have_text("exited", timeout=15_000)
        reopened.get_by_role("button", name="New session").click()  # the old id is gone: a new one, a new shell
        expect(reopened.locator("#terminal-state")).to_have_text("connected", timeout=30_000)
        assert reopened.url != address and "session=" in reopened.url
        reopened.keyboard.type("echo fresh-${MARK:-unset}")
        reopened.keyboard.press("Enter")
        expect(terminal_row(reopened, "fresh-unset")).to_have_count(1, timeout=15_000)
        expect(terminal_row(reopened, "before-kept-42")).to_have_count(0)


# Every text the terminal's state badge shows, in order, kept in the page itself.
RECORD_STATES = """() => {
  window.states = [];
  const badge = document.getElementById("terminal-state");
  const note = () => {
    if (window.states[window.states.length - 1] !== badge.textContent) window.states.push(badge.textContent);
  };
  new MutationObserver(note).observe(badge, { subtree: true, childList: true, characterData: true });
  note();
}"""


def test_the_page_leads_with_connect_on_a_phone_and_an_open_terminal_follows_a_rebuild(
    deployment: Deployment, page: Page
) -> None:
    """At 390 px the Connect block (the agent: terminal, apps, SSH command) comes right after the status and
    actions; a terminal left open while the workspace restarts (a stop and a start: a new agent) reconnects to the
    new agent by itself and types into a new shell there."""
    with started(deployment, "follow") as agent:
        sign_in(page, deployment, "alice")
        workspace_url = f"{deployment.url}/workspaces/{deployment.workspace('alice', 'follow')['id']}"
        page.set_viewport_size({"width": 390, "height": 844})
        page.goto(workspace_url)
        connect = page.locator("#connect")
        expect(connect.get_by_role("link", name="Terminal")).to_be_visible()
        top = connect.bounding_box()
        schedule = page.locator("#schedule-card").bounding_box()
        timeline = page.locator("#build-timeline").bounding_box()
        assert top is not None and schedule is not None and timeline is not None
        print(f"Connect block at y={top['y']:.0f} px of a 390 px wide page")  # measured, for the report
        assert top["y"] < 844 and top["y"] < schedule["y"] < timeline["y"], (top, schedule, timeline)
        page.screenshot(path=str(ARTIFACTS / "workspace-page-390-connect-first.png"), full_page=True)

        page.set_viewport_size({"width": 1000, "height": 700})
        page.goto(f"{workspace_url}/agents/{agent['id']}/terminal")
        expect(page.locator("#terminal-state")).to_have_text("connected", timeout=30_000)
        page.keyboard.type("echo before-$((20+1))")
        page.keyboard.press("Enter")
        expect(terminal_row(page, "before-21")).to_have_count(1, timeout=15_000)
        page.evaluate(RECORD_STATES)

        restarted = deployment.cli("alice", "restart", "follow", "-y")
        assert restarted.returncode == 0, restarted.stdout + restarted.stderr
        new_agent = deployment.wait_ready("alice", "follow")
        assert new_agent["id"] != agent["id"]
        followed = re.compile(rf"/agents/{new_agent['id']}/terminal\?session=[0-9a-f-]{{36}}$")
        expect(page).to_have_url(followed, timeout=WAIT)
        expect(page.locator("#terminal-state")).to_have_text("connected", timeout=WAIT)
        states = page.evaluate("window.states")
        assert "reconnecting to the new agent…" in states, states
        expect(page.get_by_role("link", name="Open the new terminal")).to_be_hidden()
        page.keyboard.type("echo after-$((40+2))")
        page.keyboard.press("Enter")
        expect(terminal_row(page, "after-42")).to_have_count(1, timeout=15_000)  # a shell on the new agent
        expect(terminal_row(page, "[the workspace was rebuilt: reconnecting to its new agent]")).to_have_count(1)
        page.screenshot(path=str(ARTIFACTS / "agent-terminal-followed-rebuild.png"))


def test_only_the_owner_gets_a_terminal_and_members_see_nothing(deployment: Deployment, page: Page) -> None:
    with started(deployment, "guarded") as agent:
        workspace_url = f"{deployment.url}/workspaces/{deployment.workspace('alice', 'guarded')['id']}"
        terminal_url = f"{workspace_url}/agents/{agent['id']}/terminal"

        sign_in(page, deployment, "carol")
        for url, message in ((workspace_url, "No such workspace."), (terminal_url, "No such workspace agent.")):
            response = page.goto(url)
            assert response is not None and response.status == 404
            expect(page.locator(".error-code")).to_have_text("404")
            expect(page.locator("h1")).to_have_text(message)
        expect(page.get_by_text("guarded")).to_have_count(0)

        assert page.context.browser is not None
        bob = page.context.browser.new_context(viewport={"width": 1280, "height": 900}).new_page()
        sign_in(bob, deployment, "bob")
        response = bob.goto(workspace_url)
        assert response is not None and response.status == 200
        card = bob.locator(f"#agent-{agent['id']}")
        expect(card.locator(".agent-status")).to_have_text("connected")
        expect(card.locator(".agent-lifecycle")).to_have_text("ready")
        expect(card.locator(".log-line", has_text="is up: wrote 'hello'")).to_have_count(1)
        expect(card.get_by_role("link", name="Terminal")).to_have_count(0)
        expect(bob.get_by_role("button", name="Stop")).to_have_count(0)
        bob.screenshot(path=str(ARTIFACTS / "agent-panel-template-admin.png"), full_page=True)

        response = bob.goto(terminal_url)
        assert response is not None and response.status == 403
        expect(bob.locator(".error-code")).to_have_text("403")
        expect(bob.locator("h1")).to_have_text(
            "Only the workspace's owner, a deployment owner or those it is shared with may connect to it."
        )
        expect(bob.locator("#terminal")).to_have_count(0)


def test_a_real_builds_timings_cover_its_resources_and_draw_a_readable_waterfall(
    deployment: Deployment, page: Page
) -> None:
    problems = watch_for_problems(page.context, deployment.url)
    with started(deployment, "timed"):
        build_id = deployment.workspace("alice", "timed")["latest_build"]["id"]
        with deployment.api("alice") as api:
            resources = api.get(f"/workspacebuilds/{build_id}/resources").json()
            timings = api.get(f"/workspacebuilds/{build_id}/timings").json()

        bars = timings["provisioner_timings"]
        stages = [bar["stage"] for bar in bars if bar["resource"] == ""]
        assert stages[:2] in (["init", "plan"], ["init", "apply"]) and "apply" in stages, stages
        addresses = {bar["resource"] for bar in bars if bar["stage"] == "apply"}
        for resource in resources:  # every resource of the build has its bar (by address, whatever its index)
            name = f"{resource['type']}.{resource['name']}"
            assert any(address == name or address.startswith(f"{name}[") for address in addresses), (name, addresses)
        assert all(bar["started_at"] <= bar["ended_at"] for bar in bars)
        assert [t["workspace_agent_name"] for t in timings["agent_connection_timings"]] == ["main"]
        assert "Startup Script" in [t["display_name"] for t in timings["agent_script_timings"]]
        assert {t["status"] for t in timings["agent_script_timings"]} == {"ok"}

        sign_in(page, deployment, "alice")
        page.goto(f"{deployment.url}/builds/{build_id}")
        chart = page.locator("svg.waterfall")
        expect(chart).to_be_visible()
        expect(page.locator("#timings-summary")).to_contain_text("in all")
        expect(chart.locator(".waterfall-row.is-critical").first).to_be_attached()
        expect(chart.locator(".row-script .waterfall-label")).to_contain_text(["Startup Script"])
        assert severe_violations(page) == []
        page.screenshot(path=str(ARTIFACTS / "build-timings.png"), full_page=True)

        page.set_viewport_size({"width": 390, "height": 844})
        chart.scroll_into_view_if_needed()
        box = chart.bounding_box()
        assert box is not None and box["width"] <= 390
        assert page.evaluate("document.documentElement.scrollWidth") <= 390  # nothing spills sideways
        assert severe_violations(page) == []
        page.screenshot(path=str(ARTIFACTS / "build-timings-390px.png"), full_page=True)
    assert problems == []
