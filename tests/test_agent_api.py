"""The agent side of the API and every way in, per persona, on SQLite and PostgreSQL (builds completed by the
stand-in daemon; the real agent, tunnels and apps run end to end in test_agent_e2e.py)."""

from __future__ import annotations

import base64
import itertools
import re
import threading
from dataclasses import replace
from datetime import timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.agents import services
from app.agents.tunnels import DialRequest, terminal_session_key
from app.core.columns import utcnow
from app.core.extensions import db
from app.core.signing import Signer
from app.resources.models import WorkspaceAgent
from app.workspaces import views as workspace_views
from protocol.resources import Agent
from tests.conftest import PASSWORD, Persona
from tests.support.daemon import FakeDaemon, import_template
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite")

TOKEN = "9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d"
UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}
AGENT = {
    "name": "main",
    "os": "linux",
    "arch": "amd64",
    "token": TOKEN,
    "dir": "~/src",
    "env": {"A": "1", "PATH": "/usr/bin"},
    "startup_script": "echo hello",
    "shutdown_script": "echo bye",
    "connection_timeout": 30,
    "metadata": [{"key": "load", "display_name": "Load", "script": "cat /proc/loadavg", "interval": 5, "timeout": 1}],
    "apps": [
        {"slug": "web", "display_name": "Web", "url": "http://localhost:8080", "share": "owner",
         "healthcheck": {"url": "http://localhost:8080/healthz", "interval": 5, "threshold": 3}},
        {"slug": "pub", "display_name": "Public", "url": "http://localhost:9000", "share": "public"},
        {"slug": "members", "display_name": "Members", "url": "http://localhost:9001", "share": "authenticated"},
    ],
    "scripts": [{"display_name": "Tools", "script": "echo tools", "run_on_start": True, "timeout": 60}],
    "envs": [{"name": "PATH", "value": "/opt/bin", "merge_strategy": "prepend"}, {"name": "B", "value": "2"}],
}  # fmt: skip
START = [{"name": "dev", "type": "terraform_data", "agents": [AGENT]}]
AGENT_HEADERS = {"Slipway-Agent-Token": TOKEN}


def report(client: FlaskClient, call: str, body: dict[str, Any]) -> int:
    """POST an agent report as the agent would; the status code."""
    status: int = client.post(f"/api/v2/workspaceagents/me/{call}", json=body, headers=AGENT_HEADERS).status_code
    return status


class World:
    """carol's workspace `w1`, its template imported by bob, builds completed by the stand-in daemon."""

    def __init__(self, app: Flask, personas: dict[str, Persona]) -> None:
        self.app, self.personas = app, personas
        self.api = app.test_client()
        self.daemon = FakeDaemon(self.api)
        self.template = import_template(self.api, personas, self.daemon)
        created = self.api.post(
            "/api/v2/workspaces",
            json={
                "template_id": self.template["id"],
                "name": "w1",
                "rich_parameter_values": [{"name": "region", "value": "eu"}],
            },
            headers=personas["carol"].auth,
        )
        assert created.status_code == 201, created.json
        self.workspace = created.json
        self.finish(self.workspace["latest_build"]["job"]["id"], START)

    def finish(self, job_id: str, resources: list[dict[str, Any]]) -> None:
        assert self.daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
        done = self.daemon.call(
            f"/jobs/{job_id}/complete",
            {"workspace_build": {"state": base64.b64encode(b"{}").decode(), "resources": resources}},
        )
        assert done.status_code == 204, done.json

    def build(self, transition: str) -> dict[str, Any]:
        reply = self.api.post(
            f"/api/v2/workspaces/{self.workspace['id']}/builds",
            json={"transition": transition},
            headers=self.personas["carol"].auth,
        )
        assert reply.status_code == 201, reply.json
        return dict(reply.json)

    def agent(self) -> dict[str, Any]:
        found = self.api.get(f"/api/v2/workspaces/{self.workspace['id']}", headers=self.personas["carol"].auth).json
        return dict(found["latest_build"]["resources"][0]["agents"][0])

    def connect(self, agent_id: str) -> None:
        """What the control connection records when the agent connects."""
        with self.app.app_context():
            services.mark_connected(agent_id, "connection-1")


@pytest.fixture
def world(app: Flask, personas: dict[str, Persona]) -> World:
    return World(app, personas)


def test_only_the_current_builds_agent_is_accepted(world: World) -> None:
    api = world.api
    assert api.get("/api/v2/workspaceagents/me/manifest").status_code == 401
    assert api.get("/api/v2/workspaceagents/me/manifest", headers={"Slipway-Agent-Token": "nope"}).status_code == 401
    first = api.get("/api/v2/workspaceagents/me/manifest", headers=AGENT_HEADERS)
    assert first.status_code == 200 and first.json["agent_name"] == "main"
    assert api.get("/api/v2/workspaceagents/me/manifest", headers={"Coder-Session-Token": TOKEN}).status_code == 200

    stop = world.build("stop")
    assert world.daemon.call(f"/jobs/{stop['job']['id']}/acquire").status_code == 200
    # While the stop runs, the outgoing agent may still report its shutdown.
    assert report(api, "lifecycle", {"state": "off"}) == 204
    world.daemon.call(f"/jobs/{stop['job']['id']}/complete", {"workspace_build": {"resources": []}})
    assert api.get("/api/v2/workspaceagents/me/manifest", headers=AGENT_HEADERS).status_code == 401

    start = world.build("start")
    # The token survives stop and start (the coder_agent resource keeps it): the old rows must not count.
    assert api.get("/api/v2/workspaceagents/me/manifest", headers=AGENT_HEADERS).status_code == 401
    world.finish(start["job"]["id"], START)
    again = api.get("/api/v2/workspaceagents/me/manifest", headers=AGENT_HEADERS)
    assert again.status_code == 200 and again.json["agent_id"] != first.json["agent_id"]


def test_manifest_carries_scripts_environment_metadata_and_apps(world: World) -> None:
    manifest = world.api.get("/api/v2/workspaceagents/me/manifest", headers=AGENT_HEADERS).json
    assert manifest["workspace_name"] == "w1" and manifest["owner_name"] == "carol"
    assert manifest["directory"] == "~/src"
    assert manifest["environment_variables"] == {"A": "1", "PATH": "/opt/bin:/usr/bin", "B": "2"}
    scripts = {script["display_name"]: script for script in manifest["scripts"]}
    assert set(scripts) == {"Startup Script", "Tools", "Shutdown Script"}
    assert scripts["Startup Script"]["run_on_start"] and scripts["Shutdown Script"]["run_on_stop"]
    assert scripts["Tools"]["timeout"] == 60 and len({s["log_source_id"] for s in scripts.values()}) == 3
    assert manifest["metadata"] == [
        {"key": "load", "display_name": "Load", "script": "cat /proc/loadavg", "interval": 5, "timeout": 1, "order": 0}
    ]
    apps = {app["slug"]: app for app in manifest["apps"]}
    assert apps["web"]["healthcheck"]["threshold"] == 3 and apps["pub"]["healthcheck"] is None
    assert TOKEN not in str(manifest)


def test_reports_are_recorded_checked_and_shown(world: World) -> None:
    api, headers = world.api, AGENT_HEADERS
    assert report(api, "lifecycle", {"state": "asleep"}) == 400
    assert report(api, "lifecycle", {"state": "starting"}) == 204
    assert report(api, "lifecycle", {"state": "ready"}) == 204
    startup = {"version": "0.1.0", "expanded_directory": "/home/carol/src"}
    assert report(api, "startup", startup) == 204
    metadata = [
        {"key": "load", "value": "x" * 3000, "error": ""},
        {"key": "undeclared", "value": "ignored"},
    ]
    assert report(api, "metadata", {"metadata": metadata}) == 204
    bad_app = {"healths": {"pub": "healthy"}}  # pub has no healthcheck
    assert report(api, "app-health", bad_app) == 400
    bad_state = {"healths": {"web": "great"}}
    assert report(api, "app-health", bad_state) == 400
    healthy = {"healths": {"web": "healthy"}}
    assert report(api, "app-health", healthy) == 204
    assert api.post("/api/v2/workspaceagents/me/logs", json={"logs": "no"}, headers=headers).status_code == 400

    agent = world.agent()
    assert agent["lifecycle_state"] == "ready" and agent["started_at"] and agent["ready_at"]
    assert agent["version"] == "0.1.0" and agent["expanded_directory"] == "/home/carol/src"
    [load] = agent["metadata"]
    assert load["result"]["value"] == "value of 3000 bytes exceeded 2048 bytes" and load["result"]["collected_at"]
    apps = {app["slug"]: app for app in agent["apps"]}
    assert apps["web"]["health"] == "healthy" and apps["pub"]["health"] == "disabled"
    assert apps["members"]["sharing_level"] == "authenticated"


def test_agent_logs_stop_at_one_mebibyte_with_a_notice(world: World) -> None:
    api, headers = world.api, AGENT_HEADERS
    source = world.agent()["log_sources"][0]["id"]
    line = {"output": "x" * 1000, "level": "info", "log_source_id": source}
    reply = api.post("/api/v2/workspaceagents/me/logs", json={"logs": [line] * 1000}, headers=headers)
    assert reply.status_code == 200 and reply.json == {"log_limit_exceeded": False}
    over = api.post("/api/v2/workspaceagents/me/logs", json={"logs": [line] * 100}, headers=headers)
    assert over.json == {"log_limit_exceeded": True}
    assert api.post("/api/v2/workspaceagents/me/logs", json={"logs": [line]}, headers=headers).json == {
        "log_limit_exceeded": True
    }
    agent = world.agent()
    logs = api.get(f"/api/v2/workspaceagents/{agent['id']}/logs", headers=world.personas["carol"].auth).json
    assert agent["logs_overflowed"] and agent["logs_length"] <= 1024 * 1024
    assert logs[-1]["level"] == "warn" and "Log limit of 1024 KiB" in logs[-1]["output"]
    # 1,000 lines of 1,000 bytes, then 48 more fit under 1 MiB, then the notice.
    assert len(logs) == 1000 + 48 + 1 and logs[0]["source_id"] == source
    too_many = api.post("/api/v2/workspaceagents/me/logs", json={"logs": [line] * 1001}, headers=headers)
    assert too_many.status_code == 400


@pytest.mark.parametrize(("persona", "status"), [("carol", 200), ("alice", 200), ("bob", 200), ("dave", 404)])
def test_agent_and_its_logs_are_visible_to_those_who_see_the_workspace(world: World, persona: str, status: int) -> None:
    agent_id = world.agent()["id"]
    auth = world.personas[persona].auth
    assert world.api.get(f"/api/v2/workspaceagents/{agent_id}", headers=auth).status_code == status
    assert world.api.get(f"/api/v2/workspaceagents/{agent_id}/logs", headers=auth).status_code == status
    assert world.api.get(f"/api/v2/workspaceagents/{agent_id}/logs").status_code == 401


@pytest.mark.parametrize(
    ("persona", "status"),
    # carol owns the workspace and alice owns the deployment: both get past the guard to "not connected" (409);
    # bob administers templates but may not enter others' workspaces; dave cannot even see it.
    [("carol", 409), ("alice", 409), ("bob", 403), ("dave", 404)],
)
def test_only_the_owner_and_deployment_owners_may_open_a_tunnel(world: World, persona: str, status: int) -> None:
    agent_id = world.agent()["id"]
    headers = {**UPGRADE, **world.personas[persona].auth}
    reply = world.api.get(f"/api/v2/workspaceagents/{agent_id}/tunnel?service=ssh", headers=headers)
    assert reply.status_code == status, reply.json
    if status == 409:
        assert "main of w1 is connecting" in reply.json["message"]


def test_tunnel_requests_are_checked(world: World) -> None:
    agent_id, carol = world.agent()["id"], world.personas["carol"]
    path = f"/api/v2/workspaceagents/{agent_id}/tunnel"
    assert world.api.get(f"{path}?service=ssh", headers=UPGRADE).status_code == 401
    for query in ("service=telnet", "service=tcp&port=0", "service=tcp&port=x", "service=pty&rows=0",
                  "service=pty&reconnect=not-a-uuid"):  # fmt: skip
        reply = world.api.get(f"{path}?{query}", headers={**UPGRADE, **carol.auth})
        assert reply.status_code == 400, query
    world.connect(agent_id)
    stop = world.build("stop")
    reply = world.api.get(f"{path}?service=ssh", headers={**UPGRADE, **carol.auth})
    assert reply.status_code == 409 and "Workspace w1 is pending" in reply.json["message"]
    world.finish(stop["job"]["id"], [])
    reply = world.api.get(f"{path}?service=ssh", headers={**UPGRADE, **carol.auth})
    assert reply.json["message"] == "Workspace w1 is stopped: start it with `slipway start w1`."


def test_a_browser_tunnel_needs_the_sites_own_origin(app: Flask, world: World) -> None:
    agent_id = world.agent()["id"]
    browser = app.test_client()
    sign_in(browser, "carol@example.com", PASSWORD)
    path = f"/api/v2/workspaceagents/{agent_id}/tunnel?service=pty"
    foreign = browser.get(path, headers={**UPGRADE, "Origin": "https://evil.example"})
    assert foreign.status_code == 403
    own = browser.get(path, headers={**UPGRADE, "Origin": "http://localhost"})
    assert own.status_code == 409  # past the guards: the agent has not connected


@pytest.mark.parametrize(
    ("app_slug", "persona", "outcome"),
    [
        # Allowed viewers get through to the agent, which is not connected here: 502 naming the app.
        ("web", "carol", 502), ("web", "alice", 502), ("web", "bob", 404), ("web", "dave", 404),
        ("web", None, 302),
        ("members", "dave", 502), ("members", "bob", 502), ("members", None, 302),
        ("pub", None, 502), ("pub", "dave", 502),
    ],
)  # fmt: skip
def test_app_share_levels(app: Flask, world: World, app_slug: str, persona: str | None, outcome: int) -> None:
    browser = app.test_client()
    if persona is not None:
        sign_in(browser, f"{persona}@example.com", PASSWORD)
    reply = browser.get(f"/@carol/w1.main/apps/{app_slug}/index.html?x=1")
    assert reply.status_code == outcome
    if outcome == 302:
        assert "/login?next=" in reply.headers["Location"]
    if outcome == 502:
        assert "is not reachable" in reply.get_data(as_text=True)


def test_app_paths_resolve_or_say_what_is_missing(app: Flask, world: World) -> None:
    browser = app.test_client()
    sign_in(browser, "carol@example.com", PASSWORD)
    slash = browser.get("/@carol/w1/apps/web?a=b")
    assert slash.status_code == 308 and slash.headers["Location"].endswith("/@carol/w1/apps/web/?a=b")
    assert browser.get("/@carol/w1/apps/web/").status_code == 502  # one agent: its name may be left out
    assert browser.post("/@carol/w1.main/apps/web/form", data={"a": "b"}).status_code == 502  # no CSRF token
    missing = ("/@carol/w1.other/apps/web/", "/@carol/w2/apps/web/", "/@carol/w1/apps/nope/", "/@nobody/w1/apps/web/")
    for path in missing:
        assert browser.get(path).status_code == 404, path


def test_path_apps_can_be_turned_off(app: Flask, world: World) -> None:
    app.config["SLIPWAY_SETTINGS"] = replace(app.config["SLIPWAY_SETTINGS"], disable_path_apps=True)
    browser = app.test_client()
    sign_in(browser, "carol@example.com", PASSWORD)
    reply = browser.get("/@carol/w1/apps/pub/")
    assert reply.status_code == 404 and "--disable-path-apps" in reply.get_data(as_text=True)


def test_workspace_health_follows_its_agents(app: Flask, world: World) -> None:
    carol = world.personas["carol"]
    workspace = world.api.get(f"/api/v2/workspaces/{world.workspace['id']}", headers=carol.auth).json
    agent_id = workspace["latest_build"]["resources"][0]["agents"][0]["id"]
    assert workspace["health"] == {"healthy": False, "failing_agents": [agent_id]}  # not connected yet
    world.connect(agent_id)
    workspace = world.api.get(f"/api/v2/workspaces/{world.workspace['id']}", headers=carol.auth).json
    assert workspace["health"] == {"healthy": True, "failing_agents": []}
    assert world.agent()["status"] == "connected"
    with app.app_context():
        services.mark_disconnected(agent_id, "connection-1")
    assert world.agent()["status"] == "disconnected"
    with app.app_context():
        agent = db.session.get(WorkspaceAgent, agent_id)
        assert agent is not None
        agent.last_connected_at = utcnow() - timedelta(seconds=40)
        agent.disconnected_at = utcnow() - timedelta(seconds=31)  # gone for longer than its connection_timeout
        db.session.commit()
    assert world.agent()["status"] == "timeout" and world.agent()["health"]["reason"]


@pytest.mark.parametrize(("persona", "status"), [("carol", 200), ("alice", 200), ("bob", 403), ("dave", 404)])
def test_terminal_page_is_for_those_who_may_enter(app: Flask, world: World, persona: str, status: int) -> None:
    browser = app.test_client()
    sign_in(browser, f"{persona}@example.com", PASSWORD)
    agent_id = world.agent()["id"]
    page = browser.get(f"/workspaces/{world.workspace['id']}/agents/{agent_id}/terminal")
    assert page.status_code == status
    if status == 200:
        text = page.get_data(as_text=True)
        assert f'data-socket="/api/v2/workspaceagents/{agent_id}/tunnel"' in text and "xterm" in text


def test_workspace_page_shows_the_agent_panel(app: Flask, world: World) -> None:
    browser = app.test_client()
    sign_in(browser, "carol@example.com", PASSWORD)
    agent_id = world.agent()["id"]
    source = world.agent()["log_sources"][0]["id"]
    line = {"output": "<b>started</b>", "level": "info", "log_source_id": source}
    world.api.post("/api/v2/workspaceagents/me/logs", json={"logs": [line]}, headers=AGENT_HEADERS)
    page = browser.get(f"/workspaces/{world.workspace['id']}").get_data(as_text=True)
    assert 'class="agent-name">main<' in page and "agent-status" in page and "connecting" in page
    assert 'href="/@carol/w1.main/apps/web/"' in page and 'href="/@carol/w1.main/apps/pub/"' in page
    assert "&lt;b&gt;started&lt;/b&gt;" in page and "Startup Script" in page  # escaped, labelled by its script
    assert f"/agents/{agent_id}/logs/stream?after=" in page and "Load" in page
    panel = browser.get(f"/workspaces/{world.workspace['id']}/agents/{agent_id}/panel")
    assert panel.status_code == 200 and 'hx-trigger="sse:agents"' in panel.get_data(as_text=True)
    dave = app.test_client()
    sign_in(dave, "dave@example.com", PASSWORD)
    assert dave.get(f"/workspaces/{world.workspace['id']}/agents/{agent_id}/panel").status_code == 404


@pytest.mark.timeout(60)  # were the notice missed, only the far-off poll would end the wait
def test_the_workspace_stream_follows_its_agents_notices(
    app: Flask, world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An agent's report wakes its workspace's page at once: the stream listens on the agent's own notices (polling,
    pushed far out here, only catches what sends none)."""
    monkeypatch.setattr(workspace_views, "SECTION_POLL_SECONDS", 600.0)
    browser = app.test_client()
    sign_in(browser, "carol@example.com", PASSWORD)
    response = browser.get(f"/workspaces/events?workspace={world.workspace['id']}", buffered=False)
    chunks = iter(response.response)
    assert next(chunks).decode().startswith(": connected")
    done = threading.Event()

    def keep_reporting() -> None:  # repeated: the stream subscribes to the agent just after its preamble
        for attempt in itertools.count():
            metadata = [{"key": "load", "value": f"0.{attempt}", "error": ""}]
            assert report(world.api, "metadata", {"metadata": metadata}) == 204
            if done.wait(0.5):
                return

    reporter = threading.Thread(target=keep_reporting, daemon=True)
    reporter.start()
    try:
        seen = ""
        while "event: agents" not in seen:
            seen += next(chunks).decode()
    finally:
        done.set()
        response.close()
        reporter.join(timeout=10)


def set_definition(app: Flask, agent_id: str, **fields: Any) -> None:
    """Store fields in the agent's definition, as a template (or a member's own daemon) may send them."""
    with app.app_context():
        agent = db.session.get(WorkspaceAgent, agent_id)
        assert agent is not None
        agent.stored_definition = Agent.from_json({**agent.definition.to_json(), **fields})
        db.session.commit()


def test_only_http_troubleshooting_urls_and_icons_are_shown(app: Flask, world: World) -> None:
    browser = app.test_client()
    sign_in(browser, "carol@example.com", PASSWORD)
    agent_id = world.agent()["id"]
    page_path = f"/workspaces/{world.workspace['id']}"
    panel_path = f"{page_path}/agents/{agent_id}/panel"
    unsafe = (
        "javascript:alert(document.cookie)", " JavaScript:alert(1)", "java\tscript:alert(1)",
        "data:text/html,<script>alert(1)</script>", "vbscript:msgbox(1)",
    )  # fmt: skip
    for url in unsafe:
        apps = [{**item, "icon": url} for item in AGENT["apps"]]
        set_definition(app, agent_id, troubleshooting_url=url, apps=apps)
        for path in (page_path, panel_path):  # the agent is not connected yet: unhealthy, so the link would show
            text = browser.get(path).get_data(as_text=True)
            assert "The agent has not connected yet." in text
            assert "Troubleshooting" not in text and "script:" not in text.lower() and "data:" not in text, url
        shown = world.agent()
        assert shown["troubleshooting_url"] == "" and {item["icon"] for item in shown["apps"]} == {""}, url

    apps = [{**item, "icon": "/icon/code.svg"} for item in AGENT["apps"]]
    set_definition(app, agent_id, troubleshooting_url="https://docs.example.com/agents", apps=apps)
    text = browser.get(panel_path).get_data(as_text=True)
    assert '<a href="https://docs.example.com/agents" rel="noopener noreferrer">Troubleshooting</a>' in text
    shown = world.agent()
    assert shown["troubleshooting_url"] == "https://docs.example.com/agents"
    assert {item["icon"] for item in shown["apps"]} == {"/icon/code.svg"}


def test_who_may_not_see_a_workspace_cannot_tell_whether_it_exists(app: Flask, world: World) -> None:
    # carol's w1 exists (its app `web` is hers alone, it has one agent, `main`); w2 and nobody's w1 do not.
    pairs = [
        ("/@carol/w1.main/apps/web/", "/@carol/w2.main/apps/web/"),
        ("/@carol/w1/apps/web/", "/@nobody/w1/apps/web/"),
        ("/@carol/w1.other/apps/web/", "/@carol/w2.other/apps/web/"),
        ("/@carol/w1/apps/nope/", "/@carol/w2/apps/nope/"),
    ]
    anonymous = app.test_client()
    dave = app.test_client()
    sign_in(dave, "dave@example.com", PASSWORD)
    for existing, missing in pairs:
        for path in (existing, missing):  # sent to sign in, wherever they were going
            answer = anonymous.get(f"{path}page?q=1")
            assert answer.status_code == 302, path
            location = urlsplit(answer.headers["Location"])
            assert location.path == "/login" and parse_qs(location.query) == {"next": [f"{path}page?q=1"]}
        # The same page, but for the CSRF token every page carries.
        seen = [dave.get(path) for path in (existing, missing)]
        assert [answer.status_code for answer in seen] == [404, 404], (existing, missing)
        texts = [re.sub(r"[\w-]{20,}\.[\w-]{6}\.[\w-]{20,}", "", answer.get_data(as_text=True)) for answer in seen]
        assert texts[0] == texts[1], (existing, missing)
    # Those who may see the workspace are still told what is missing.
    carol = app.test_client()
    sign_in(carol, "carol@example.com", PASSWORD)
    assert "has no app &#39;nope&#39;" in carol.get("/@carol/w1/apps/nope/").get_data(as_text=True)


def test_terminal_session_keys_belong_to_one_user_and_agent() -> None:
    signer, browser_id = Signer("server-secret"), "6f1c2c8e-3b5e-4d2a-9a51-0c6b3f6f2a10"
    key = terminal_session_key(signer, "alice", "agent-1", browser_id)
    assert re.fullmatch(r"[0-9a-f]{64}", key) and browser_id not in key
    others = {
        terminal_session_key(signer, "bob", "agent-1", browser_id),  # another user with the same browser id
        terminal_session_key(signer, "alice", "agent-2", browser_id),
        terminal_session_key(Signer("another-secret"), "alice", "agent-1", browser_id),  # another deployment's secret
    }
    assert key not in others and len(others) == 3
    dial = DialRequest(service="pty", reconnect=key).for_tunnel("t1")
    assert dial.reconnect == key and len(dial.dumps()) < 1024
