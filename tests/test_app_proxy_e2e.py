"""What crosses the app proxy, end to end: a real server, the `local` example's workspace with its real agent, and a
dev server inside it shared with everyone (`dev_share=public`), since path apps share the dashboard's origin.

One deployment and one workspace serve the module: every test here only reads through the proxy.
"""

from __future__ import annotations

import http.client
import json
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from playwright.sync_api import expect

from tests.support.browser import browser_page, sign_in_page
from tests.support.deployment import ECHO_SERVER, Deployment, running_deployment
from tests.support.net import free_port

APP = "/@alice/shared.main/apps/dev/"


@pytest.fixture(scope="module")
def deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    with running_deployment(tmp_path_factory.mktemp("app-proxy")) as deployment:
        deployment.push_local()
        port = free_port()
        deployment.create("alice", "shared", f"dev_port={port}", "dev_share=public")
        deployment.wait_ready("alice", "shared")
        deployment.start_server("alice", "shared", ECHO_SERVER, port)
        yield deployment


def raw_get(deployment: Deployment, target: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    """GET with the request target exactly as given (HTTP clients normalise `%2e%2e` and friends)."""
    address = urlsplit(deployment.url)
    connection = http.client.HTTPConnection(address.hostname or "", address.port, timeout=30)
    try:
        connection.request("GET", target, headers=headers or {})
        reply = connection.getresponse()
        return reply.status, reply.read().decode()
    finally:
        connection.close()


def test_an_app_cannot_set_slipway_cookies_or_cookies_outside_its_path(deployment: Deployment) -> None:
    reply = httpx.get(f"{deployment.url}{APP}set-cookies", timeout=30)  # anyone may open a public app
    assert reply.status_code == 200 and reply.text == "cookies set"
    cookies = reply.headers.get_list("set-cookie")
    # Slipway's session (in any spelling, or nameless, which browsers send back as `slipway_session=planted`),
    # Flask's and Flask-Login's cookies are dropped; the app's own are kept, scoped to the app.
    assert [cookie.split("=", 1)[0] for cookie in cookies] == ["theme", "pref", "deep"], cookies
    assert cookies == [
        f"theme=dark; SameSite=Lax; Path={APP}",
        f"pref=1; Path={APP}",
        f"deep=1; Max-Age=60; HttpOnly; Path={APP}",
    ]
    # Wiping the origin's storage (signing the viewer out of the dashboard) or widening a service worker's scope.
    assert "clear-site-data" not in reply.headers and "service-worker-allowed" not in reply.headers

    # A browser keeps them for the app's pages only: the dashboard never gets them.
    with httpx.Client(base_url=deployment.url, timeout=30) as browser:
        browser.get(f"{APP}set-cookies")
        page = browser.get(f"{APP}page").text
        assert page.startswith("dev server ok path=/page cookie=")
        assert set(page.split("cookie=", 1)[1].split("; ")) == {"theme=dark", "pref=1", "deep=1"}
        dashboard = browser.get("/healthz")
        assert "cookie" not in dashboard.request.headers and "slipway_session" not in browser.cookies


def test_slipway_credentials_never_reach_the_app(deployment: Deployment) -> None:
    carol = deployment.people["carol"].token
    credentials = {
        "Authorization": f"Bearer {carol}",
        "Slipway-Session-Token": carol,
        "Coder-Session-Token": carol,
        "Slipway-Agent-Token": "agent-token-secret",
        "Slipway-Provisioner-Key": "provisioner-key-secret",
        "Slipway-Provisioner-PSK": "provisioner-psk-secret",
    }
    sent = {
        **credentials,
        "Cookie": "slipway_session=cookie-secret; session=s-secret; remember_token=r-secret; theme=dark",
        "X-Requested-By": "the app's own header",
    }
    reply = httpx.get(f"{deployment.url}{APP}headers", headers=sent, timeout=30)
    assert reply.status_code == 200, reply.text
    received = {name.lower(): value for name, value in reply.json()}
    assert received["x-requested-by"] == "the app's own header" and received["cookie"] == "theme=dark"
    assert not {name.lower() for name in credentials} & set(received), received
    assert carol not in reply.text and "secret" not in reply.text
    # The same with only the token headers: still authenticated (not sent to sign in), still withheld.
    only_tokens = {"Slipway-Session-Token": carol, "Coder-Session-Token": carol}
    reply = httpx.get(f"{deployment.url}{APP}headers", headers=only_tokens, timeout=30)
    assert reply.status_code == 200 and carol not in reply.text


def test_the_app_gets_the_browser_s_host_and_the_proxy_s_forwarding_headers(deployment: Deployment) -> None:
    """As behind Coder's proxy: an app checking Origin against Host (Jupyter, Vite) sees the dashboard's address the
    browser used, and where the request came from is the proxy's word, never the client's. (X-Forwarded-Proto is
    left out: gunicorn takes it from a trusted proxy, and loopback is one by default.)"""
    host = urlsplit(deployment.url).netloc
    spoofed = {
        "X-Forwarded-For": "203.0.113.9",
        "X-Forwarded-Host": "evil.example",
        "X-Forwarded-Port": "443",
        "Forwarded": "for=203.0.113.9;host=evil.example",
        "X-Real-IP": "203.0.113.9",
    }
    reply = httpx.get(f"{deployment.url}{APP}headers", headers=spoofed, timeout=30)
    assert reply.status_code == 200, reply.text
    received = {name.lower(): value for name, value in reply.json()}
    assert received["host"] == host
    assert received["x-forwarded-host"] == host and received["x-forwarded-proto"] == "http"
    assert received["x-forwarded-for"] == "127.0.0.1"
    assert not {"x-forwarded-port", "forwarded", "x-real-ip"} & set(received), received
    assert "evil.example" not in reply.text and "203.0.113.9" not in reply.text


def test_the_app_gets_its_path_and_query_as_the_client_sent_them(deployment: Deployment) -> None:
    status, body = raw_get(deployment, f"{APP}a%3Fb/%2e%2e/c?x=%20y&z=%3F")
    assert status == 200 and body == "dev server ok path=/a%3Fb/%2e%2e/c?x=%20y&z=%3F cookie=", body
    status, body = raw_get(deployment, f"{APP}with%20space/a%2Fb%23hash")
    assert status == 200 and body == "dev server ok path=/with%20space/a%2Fb%23hash cookie=", body
    # The prefix may be spelt otherwise (the agent's name left out, letters escaped): the app's part is still raw.
    status, body = raw_get(deployment, "/@alice/shared/apps/d%65v/x%3Fy")
    assert status == 200 and body == "dev server ok path=/x%3Fy cookie=", body


def test_anonymous_callers_cannot_tell_which_workspaces_exist(deployment: Deployment) -> None:
    paths = [
        "/@alice/shared/apps/nope/",  # the workspace exists, the app does not
        "/@alice/shared.other/apps/dev/",  # nor this agent
        "/@alice/ghost/apps/dev/",  # no such workspace
        "/@nobody/ghost/apps/dev/",  # no such user
    ]
    for path in paths:
        reply = httpx.get(f"{deployment.url}{path}", timeout=30)
        assert reply.status_code == 302, path
        location = urlsplit(reply.headers["location"])
        assert location.path == "/login" and parse_qs(location.query) == {"next": [path]}, path
    dave = deployment.people["dave"].auth
    answers = {path: httpx.get(f"{deployment.url}{path}", headers=dave, timeout=30) for path in paths}
    assert {answer.status_code for answer in answers.values()} == {404}
    messages = {answer.text.split("<h1>", 1)[1].split("</h1>", 1)[0] for answer in answers.values()}
    assert messages == {"There is no app &#39;nope&#39; here, or you may not open it.",
                        "There is no app &#39;dev&#39; here, or you may not open it."}  # fmt: skip


@pytest.mark.browser
def test_an_app_page_runs_sandboxed_even_for_the_workspace_s_owner(deployment: Deployment) -> None:
    """A path app shares the dashboard's origin: its pages must never act there as the person who opened them,
    the owner included (an app answering on a port another workspace of the same network took serves that
    workspace's page). The sandbox gives the page an opaque origin: no cookies, no storage, no API."""
    with browser_page() as page:
        sign_in_page(page, deployment.url, "alice@example.com")
        page.wait_for_url(f"{deployment.url}/workspaces*")
        assert page.context.cookies(), "signed in: the dashboard's session is in the browser"
        opened = page.goto(f"{deployment.url}{APP}probe")
        assert opened is not None
        policy = opened.headers["content-security-policy"]
        assert policy.startswith("sandbox allow-scripts") and "allow-same-origin" not in policy, policy
        result = page.locator("#result")
        expect(result).not_to_be_empty()  # the app's script did run
        found = json.loads(result.text_content() or "")
        assert found["origin"] == "null", found
        assert found["cookie"].startswith("refused: ") and found["storage"].startswith("refused: "), found
        # Cross-origin from the sandbox: the session cookie (SameSite=Lax) does not go along, and nothing is read.
        assert found["api"] == "refused: TypeError" and found["account"] == "refused: TypeError", found
        assert "alice" not in json.dumps(found)
