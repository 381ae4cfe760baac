"""Subdomain apps in process: the host scheme, the one-time code exchange (single use, expiry, scope), the app
host's cookie, who may open what, and what happens without a wildcard URL (a real browser runs them end to end
in test_dev_urls_e2e.py). A 502 "not reachable" means the request got past every check to the (absent) agent."""

from __future__ import annotations

from dataclasses import replace
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient
from sqlalchemy import update
from werkzeug.test import TestResponse

from app.agents import app_tokens
from app.agents.hosts import AppHost, NotAnAppHost, Wildcard, parse_label
from app.agents.proxy import is_slipway_cookie
from app.core.config import Settings, SettingsError, load_settings
from app.core.extensions import db
from app.users.models import User
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.daemon import FakeDaemon, push_version
from tests.support.dev_urls import AGENT, create_workspace
from tests.support.web import post_form, sign_in

pytestmark = pytest.mark.databases("sqlite")

WILDCARD = "*.apps.test:3000"
ACCESS = "http://dash.test:3000"
SITE = "site--main--w1--carol.apps.test:3000"


@pytest.fixture
def settings(tmp_path: Any, database_url: str, redis_server: str) -> Settings:
    return make_settings(
        tmp_path,
        database_url,
        redis_server,
        provisioner_daemon_psk="test-daemon-psk",
        access_url=ACCESS,
        wildcard_access_url=WILDCARD,
    )


@pytest.fixture
def workspace(app: Flask, personas: dict[str, Persona]) -> dict[str, Any]:
    return create_workspace(app, personas)


def dashboard(app: Flask, persona: str) -> FlaskClient:
    browser = app.test_client()
    sign_in(browser, f"{persona}@example.com", PASSWORD)
    return browser


def on_host(client: FlaskClient, host: str, path: str = "/", **kwargs: Any) -> TestResponse:
    return client.get(path, base_url=f"http://{host}", **kwargs)


def sign_in_to_app(app: Flask, persona: str, host: str = SITE) -> FlaskClient:
    """The whole exchange: app host → dashboard → app host with a code → the app host's cookie."""
    browser = dashboard(app, persona)
    to_dashboard = on_host(browser, host, "/page?x=1")
    assert to_dashboard.status_code == 302
    location = urlsplit(to_dashboard.headers["Location"])
    assert f"{location.scheme}://{location.netloc}" == ACCESS and location.path == "/api/v2/applications/auth-redirect"
    back = browser.get(f"{location.path}?{location.query}")
    assert back.status_code == 302, back.get_data(as_text=True)
    target = urlsplit(back.headers["Location"])
    assert target.netloc == host and target.path == "/page"
    traded = on_host(browser, host, f"{target.path}?{target.query}")
    assert traded.status_code == 302 and traded.headers["Location"] == "/page?x=1"
    assert "domain=" not in traded.headers["Set-Cookie"].lower()
    return browser


def code_from(browser: FlaskClient, host: str) -> str:
    back = browser.get("/api/v2/applications/auth-redirect", query_string={"redirect_uri": f"http://{host}/"})
    assert back.status_code == 302, back.get_data(as_text=True)
    return parse_qs(urlsplit(back.headers["Location"]).query)[app_tokens.CODE_PARAMETER][0]


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("site--main--w1--carol", AppHost("carol", "w1", "main", slug="site")),
        ("8080--main--w1--carol", AppHost("carol", "w1", "main", port=8080)),
        ("8443s--main--w1--carol", AppHost("carol", "w1", "main", port=8443, tls=True)),
        ("Code-Server--my_agent--W1--Carol", AppHost("carol", "w1", "my_agent", slug="code-server")),
    ],
)
def test_app_hosts_follow_coders_scheme(label: str, expected: AppHost) -> None:
    assert parse_label(label) == expected
    assert parse_label(expected.label) == expected


@pytest.mark.parametrize(
    "label", ["site--main--w1", "a--b--c--d--e", "site----w1--carol", "99999--m--w--o", "-x--a--b--c"]
)
def test_labels_that_name_no_app_are_refused(label: str) -> None:
    with pytest.raises(NotAnAppHost):
        parse_label(label)


def test_the_wildcard_matches_one_label_under_it() -> None:
    pattern = Wildcard.parse("*.apps.test:3000", "https://dash.test")
    assert pattern is not None and pattern.host == "*.apps.test:3000"
    assert pattern.label_of("Site--Main--W1--Carol.apps.test:3000") == "site--main--w1--carol"
    assert pattern.label_of("site--main--w1--carol.apps.test.:3000") == "site--main--w1--carol"
    assert pattern.label_of("a.b.apps.test") is None and pattern.label_of("apps.test") is None
    assert pattern.label_of("dash.test") is None
    assert pattern.url("x--a--b--c", "/p") == "https://x--a--b--c.apps.test:3000/p"
    dashed = Wildcard.parse("*--apps.example.com", "http://example.com")
    assert dashed is not None and dashed.label_of("x--a--b--c--apps.example.com") == "x--a--b--c"


@pytest.mark.parametrize(
    ("pattern", "access_url"),
    [("apps.test", ACCESS), ("*.", ACCESS), ("*.apps.test:99999", ACCESS), ("*.a b", ACCESS), ("*.test", ACCESS)],
)
def test_a_bad_wildcard_url_fails_at_start(pattern: str, access_url: str) -> None:
    env = {"SLIPWAY_WILDCARD_ACCESS_URL": pattern, "SLIPWAY_ACCESS_URL": access_url}
    with pytest.raises(SettingsError, match="WILDCARD_ACCESS_URL"):
        load_settings(env)


def test_the_wildcard_url_is_a_setting_with_coders_spellings() -> None:
    env = {"SLIPWAY_WILDCARD_ACCESS_URL": "https://*.Apps.Example.com", "SLIPWAY_ACCESS_URL": "https://example.com"}
    assert load_settings(env).wildcard_access_url == "*.apps.example.com"


def test_applications_host_is_coders(app: Flask, personas: dict[str, Persona]) -> None:
    reply = app.test_client().get("/api/v2/applications/host", headers=personas["dave"].auth)
    assert reply.status_code == 200 and reply.json == {"host": "*.apps.test:3000"}
    assert app.test_client().get("/api/v2/applications/host").status_code == 401
    app.config["SLIPWAY_SETTINGS"] = replace(app.config["SLIPWAY_SETTINGS"], wildcard_access_url="")
    assert app.test_client().get("/api/v2/applications/host", headers=personas["dave"].auth).json == {"host": ""}


def test_the_owner_signs_in_to_the_app_host_through_a_code(app: Flask, workspace: dict[str, Any]) -> None:
    browser = sign_in_to_app(app, "carol")
    cookie = browser.get_cookie(app_tokens.APP_SESSION_COOKIE, domain="site--main--w1--carol.apps.test")
    assert cookie is not None and cookie.http_only and cookie.same_site == "Lax" and cookie.path == "/"
    assert cookie.origin_only  # host-only: never sent to another app or the dashboard
    reached = on_host(browser, SITE, "/page")
    assert reached.status_code == 502 and "is not reachable" in reached.get_data(as_text=True)
    # The app's origin never gets the dashboard's cookie, nor may it set one of Slipway's.
    assert browser.get_cookie("slipway_session", domain="localhost") is not None
    assert browser.get_cookie("slipway_session", domain="site--main--w1--carol.apps.test") is None
    assert "Set-Cookie" not in reached.headers


def test_the_dashboard_cookie_is_host_only(app: Flask, personas: dict[str, Persona]) -> None:
    browser = app.test_client()
    browser.get("/login")
    dashboard_cookie = browser.get_cookie("slipway_session", domain="localhost")
    assert dashboard_cookie is not None and dashboard_cookie.origin_only


def test_over_https_the_dashboard_cookie_cannot_be_planted_by_a_subdomain(
    app_factory: Any, tmp_path: Any, database_url: str, redis_server: str
) -> None:
    settings = make_settings(
        tmp_path, database_url, redis_server, access_url="https://slipway.test", wildcard_access_url="*.slipway.test"
    )
    browser = app_factory(settings).test_client()
    browser.get("/login", base_url="https://slipway.test", follow_redirects=True)  # to /setup: no one yet
    cookie = browser.get_cookie("__Host-slipway_session", domain="slipway.test")
    # __Host-: browsers accept it only from this host, Secure, for Path=/ and without a Domain.
    assert cookie is not None and cookie.secure and cookie.path == "/" and cookie.origin_only
    assert browser.get_cookie("slipway_session", domain="slipway.test") is None
    assert is_slipway_cookie("__Host-slipway_session")


def test_the_trade_hands_back_the_address_as_sent(app: Flask, workspace: dict[str, Any]) -> None:
    code = code_from(dashboard(app, "carol"), SITE)
    traded = on_host(app.test_client(), SITE, f"/a%2Fb/c%3F?q=%20x&{app_tokens.CODE_PARAMETER}={code}&z=1")
    assert traded.status_code == 302 and traded.headers["Location"] == "/a%2Fb/c%3F?q=%20x&z=1"


def test_a_code_is_used_once(app: Flask, workspace: dict[str, Any]) -> None:
    browser = dashboard(app, "carol")
    code = code_from(browser, SITE)
    assert on_host(app.test_client(), SITE, f"/?{app_tokens.CODE_PARAMETER}={code}").status_code == 302
    again = on_host(app.test_client(), SITE, f"/?{app_tokens.CODE_PARAMETER}={code}")
    assert again.status_code == 400 and "expired or was used" in again.get_data(as_text=True)


def test_a_code_opens_only_the_host_it_was_made_for(app: Flask, workspace: dict[str, Any]) -> None:
    code = code_from(dashboard(app, "carol"), SITE)
    other = "team--main--w1--carol.apps.test:3000"
    assert on_host(app.test_client(), other, f"/?{app_tokens.CODE_PARAMETER}={code}").status_code == 400
    # ... and is spent by the attempt.
    assert on_host(app.test_client(), SITE, f"/?{app_tokens.CODE_PARAMETER}={code}").status_code == 400


def test_a_code_expires(app: Flask, workspace: dict[str, Any], redis_server: str) -> None:
    code = code_from(dashboard(app, "carol"), SITE)
    with redis.Redis.from_url(redis_server) as client:
        key = app_tokens._code_key(code)
        assert 0 < client.ttl(key) <= app_tokens.CODE_LIFETIME.total_seconds()
        client.expire(key, 0)  # what the TTL does when it runs out
    assert on_host(app.test_client(), SITE, f"/?{app_tokens.CODE_PARAMETER}={code}").status_code == 400


def test_an_app_hosts_cookie_opens_no_other_host(app: Flask, workspace: dict[str, Any]) -> None:
    browser = sign_in_to_app(app, "carol")
    cookie = browser.get_cookie(app_tokens.APP_SESSION_COOKIE, domain="site--main--w1--carol.apps.test")
    assert cookie is not None
    thief = app.test_client()
    thief.set_cookie(app_tokens.APP_SESSION_COOKIE, cookie.value, domain="8000--main--w1--carol.apps.test")
    assert on_host(thief, "8000--main--w1--carol.apps.test:3000").status_code == 302  # sent to sign in


def test_signing_out_of_the_dashboard_ends_the_app_hosts_session(app: Flask, workspace: dict[str, Any]) -> None:
    browser = sign_in_to_app(app, "carol")
    assert on_host(browser, SITE).status_code == 502
    assert post_form(browser, "/logout", {}, token_from="/workspaces").status_code == 302
    assert on_host(browser, SITE).status_code == 302


@pytest.mark.parametrize(
    ("host", "persona", "status"),
    [
        (SITE, "carol", 502), (SITE, "alice", 502), (SITE, "dave", 404), (SITE, "bob", 404),
        ("team--main--w1--carol.apps.test:3000", "dave", 502),
        ("8000--main--w1--carol.apps.test:3000", "carol", 502),
        ("8000--main--w1--carol.apps.test:3000", "dave", 404),
        ("site--main--w9--carol.apps.test:3000", "carol", 404),
    ],
)  # fmt: skip
def test_app_hosts_follow_share_levels(
    app: Flask, workspace: dict[str, Any], host: str, persona: str, status: int
) -> None:
    browser = sign_in_to_app(app, persona, host)
    assert on_host(browser, host, "/x").status_code == status


def test_signed_out_visitors_open_public_apps_only(app: Flask, workspace: dict[str, Any]) -> None:
    visitor = app.test_client()
    assert on_host(visitor, "pub--main--w1--carol.apps.test:3000", "/").status_code == 502
    sent = on_host(visitor, SITE, "/a?b=c")
    assert sent.status_code == 302
    assert sent.headers["Location"].startswith(f"{ACCESS}/api/v2/applications/auth-redirect?redirect_uri=")
    # Not a page to redirect: told to sign in.
    assert visitor.post("/form", base_url=f"http://{SITE}").status_code == 401


def test_requests_to_an_app_host_never_reach_the_dashboard(app: Flask, workspace: dict[str, Any]) -> None:
    visitor = app.test_client()
    for host in ("nonsense.apps.test:3000", "a--b.apps.test:3000"):
        reply = on_host(visitor, host, "/login")
        assert reply.status_code == 404 and "There is no app at this address" in reply.get_data(as_text=True)
    carol = sign_in_to_app(app, "carol")
    # The app checks its own forms: no CSRF token of Slipway's is asked for.
    assert carol.post("/form", base_url=f"http://{SITE}", data={"a": "b"}).status_code == 502


def test_auth_redirect_hands_codes_to_app_hosts_only(app: Flask, workspace: dict[str, Any]) -> None:
    browser = dashboard(app, "carol")
    for target in ("http://evil.example/", "http://dash.test:3000/", "https://site--main--w1--carol.apps.test:3000/",
                   "http://x.y.apps.test:3000/", "http://bad.apps.test:3000/"):  # fmt: skip
        reply = browser.get("/api/v2/applications/auth-redirect", query_string={"redirect_uri": target})
        assert reply.status_code == 400, target
    signed_out = app.test_client().get("/api/v2/applications/auth-redirect?redirect_uri=http://x/")
    assert signed_out.status_code == 302 and "/login" in signed_out.headers["Location"]


def test_a_subdomain_app_is_never_served_on_a_path(app: Flask, workspace: dict[str, Any]) -> None:
    browser = dashboard(app, "carol")
    reply = browser.get("/@carol/w1.main/apps/site/")
    assert reply.status_code == 404 and "http://site--main--w1--carol.apps.test:3000/" in reply.get_data(as_text=True)
    assert browser.get("/@carol/w1.main/apps/path/").status_code == 502


def test_without_a_wildcard_subdomain_apps_are_unavailable_and_say_why(
    app: Flask, workspace: dict[str, Any], personas: dict[str, Persona]
) -> None:
    app.config["SLIPWAY_SETTINGS"] = replace(app.config["SLIPWAY_SETTINGS"], wildcard_access_url="")
    browser = dashboard(app, "carol")
    reply = browser.get("/@carol/w1.main/apps/site/")
    assert reply.status_code == 404 and "--wildcard-access-url" in reply.get_data(as_text=True)
    page = browser.get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert "app-unavailable-reason" in page and "no wildcard access URL" in page
    api = app.test_client().get(f"/api/v2/workspaces/{workspace['id']}", headers=personas["carol"].auth).json
    apps = {item["slug"]: item for item in api["latest_build"]["resources"][0]["agents"][0]["apps"]}
    assert "--wildcard-access-url" in apps["site"]["unavailable_reason"] and apps["path"]["unavailable_reason"] == ""


def test_with_a_wildcard_the_page_links_to_the_app_host(app: Flask, workspace: dict[str, Any]) -> None:
    page = dashboard(app, "carol").get(f"/workspaces/{workspace['id']}").get_data(as_text=True)
    assert 'href="http://site--main--w1--carol.apps.test:3000/"' in page and "app-unavailable" not in page


def test_an_import_warns_of_subdomain_apps_the_server_cannot_serve(app: Flask, personas: dict[str, Persona]) -> None:
    app.config["SLIPWAY_SETTINGS"] = replace(app.config["SLIPWAY_SETTINGS"], wildcard_access_url="")
    api = app.test_client()
    daemon = FakeDaemon(api)
    version = push_version(api, personas["bob"])
    job_id = version["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    resources = {"start": [{"name": "dev", "type": "terraform_data", "agents": [AGENT]}], "stop": []}
    done = daemon.call(f"/jobs/{job_id}/complete", {"template_import": {"resources": resources}})
    assert done.status_code == 204, done.json
    logs = api.get(f"/api/v2/templateversions/{version['id']}/logs", headers=personas["bob"].auth).json
    warnings = [line["output"] for line in logs if line["level"] == "warn"]
    assert len(warnings) == 3 and all("--wildcard-access-url" in warning for warning in warnings)
    assert any("'site'" in warning for warning in warnings)


def test_a_person_who_must_change_their_password_opens_no_app_until_they_do(
    app: Flask, workspace: dict[str, Any], personas: dict[str, Persona]
) -> None:
    """An administrator set carol's password after she opened her app: her app host's cookie and her dashboard
    session lead to the change-password page, her token gets the API's refusal, on app hosts and app paths alike."""
    browser = sign_in_to_app(app, "carol")
    assert on_host(browser, SITE).status_code == 502  # through to the (unreachable) app
    with app.app_context():
        db.session.execute(update(User).where(User.username == "carol").values(must_change_password=True))
        db.session.commit()
    sent = on_host(browser, SITE, "/page")
    location = urlsplit(sent.headers["Location"])
    assert sent.status_code == 302 and location.path == "/api/v2/applications/auth-redirect"
    asked = browser.get(f"{location.path}?{location.query}")
    assert asked.status_code == 302 and asked.headers["Location"].startswith("/password/change")
    on_path = browser.get("/@carol/w1/apps/path/")
    assert on_path.status_code == 302 and on_path.headers["Location"].startswith("/password/change?next=")
    scripted = app.test_client().get("/@carol/w1/apps/path/", headers=personas["carol"].auth)
    assert scripted.status_code == 403 and "must choose a new password" in scripted.get_data(as_text=True)
