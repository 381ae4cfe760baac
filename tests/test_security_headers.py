"""Security headers: every page, API reply, error and static file says nosniff, same-origin referrers and no
framing; pages carry the strict Content-Security-Policy (tests/test_browser_csp.py shows they work under it);
workspace apps proxied on the same origin keep their own headers."""

from __future__ import annotations

from pathlib import Path

import pytest
from flask import Flask, Response
from flask.testing import FlaskClient
from werkzeug.test import TestResponse

from app.core.security_headers import (
    NOT_A_PAGE_POLICY,
    ForeignResponse,
    add_security_headers,
    allow_inline_styles,
    page_policy,
)
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite")

COMMON = {"X-Content-Type-Options": "nosniff", "Referrer-Policy": "same-origin", "X-Frame-Options": "DENY"}


def directives(policy: str) -> dict[str, list[str]]:
    return {part.split()[0]: part.split()[1:] for part in policy.split(";") if part.strip()}


def page_policy_of(reply: Response) -> dict[str, list[str]]:
    return directives(reply.headers["Content-Security-Policy"])


def assert_common_headers(reply: TestResponse, what: str) -> None:
    for name, value in COMMON.items():
        assert reply.headers.get(name) == value, f"{what}: {name}"
    assert "frame-ancestors 'none'" in reply.headers.get("Content-Security-Policy", ""), what


def assert_page_policy(reply: TestResponse, what: str) -> None:
    assert_common_headers(reply, what)
    policy = directives(reply.headers["Content-Security-Policy"])
    assert policy["script-src"] == ["'self'"], what
    assert policy["style-src"] == ["'self'"], what
    assert policy["default-src"] == ["'self'"] and policy["connect-src"] == ["'self'"], what
    assert policy["object-src"] == ["'none'"] and policy["base-uri"] == ["'self'"], what
    assert policy["form-action"] == ["'self'"], what  # no identity provider configured here


def test_pages_carry_the_strict_policy(client: FlaskClient, personas: dict[str, Persona]) -> None:
    anonymous = {"sign-in page": client.get("/login"), "redirect to sign in": client.get("/workspaces")}
    for what, reply in anonymous.items():
        assert_page_policy(reply, what)
    sign_in(client, "carol@example.com", PASSWORD)
    pages = {
        "workspaces": client.get("/workspaces"),
        "account": client.get("/account"),
        "403 page": client.get("/users"),
        "404 page": client.get("/templates/no-such-template"),
        "CSRF error page": client.post("/account/tokens", data={"name": "x"}),
    }
    assert [reply.status_code for reply in pages.values()] == [200, 200, 403, 404, 400]
    for what, reply in pages.items():
        assert reply.mimetype == "text/html"
        assert_page_policy(reply, what)


def test_api_replies_errors_and_static_files_carry_the_headers(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    replies = {
        "API reply": client.get("/api/v2/users/me", headers=personas["carol"].auth),
        "API 401": client.get("/api/v2/users/me"),
        "API 404": client.get("/api/v2/no-such-thing", headers=personas["carol"].auth),
        "API 400": client.post("/api/v2/users/me/tokens", data="not json", headers=personas["carol"].auth),
        "static script": client.get("/static/slipway.js"),
        "static image": client.get("/static/favicon.svg"),
        "health check": client.get("/healthz"),
    }
    assert [reply.status_code for reply in replies.values()] == [200, 401, 404, 400, 200, 200, 200]
    for what, reply in replies.items():
        assert_common_headers(reply, what)
        # Not a page: should one be opened as a document (an SVG, a JSON reply), it may run and load nothing.
        assert reply.headers["Content-Security-Policy"] == NOT_A_PAGE_POLICY, what
        reply.close()


def test_slipways_own_pages_under_app_paths_carry_the_headers(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "carol@example.com", PASSWORD)
    missing = client.get("/@carol/nothing/apps/web/")  # Slipway answers this one itself: no app behind it
    assert missing.status_code == 404
    assert_page_policy(missing, "404 at an app path")


def test_proxied_app_responses_keep_their_own_headers(app: Flask) -> None:
    """What the app proxy returns (app/agents/proxy.py) is a ForeignResponse: the hook adds nothing to it, so an
    app's pages are not broken by the dashboard's policy and the sandbox for other viewers stays as it is."""
    with app.test_request_context("/@carol/w1.main/apps/web/"):
        app_page = ForeignResponse(
            "<script>app()</script>",
            mimetype="text/html",
            headers={"Content-Security-Policy": "sandbox allow-scripts", "X-Frame-Options": "SAMEORIGIN"},
        )
        answered = app.process_response(app_page)
        assert answered.headers.getlist("Content-Security-Policy") == ["sandbox allow-scripts"]
        assert answered.headers["X-Frame-Options"] == "SAMEORIGIN"
        assert "X-Content-Type-Options" not in answered.headers and "Referrer-Policy" not in answered.headers
        bare = app.process_response(ForeignResponse("plain", mimetype="text/plain"))
        assert not {"Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options"} & set(bare.headers.keys())


def test_a_page_that_asks_may_allow_inline_styles_but_never_inline_scripts(app: Flask) -> None:
    """The web terminal's xterm.js draws with <style> elements it makes; its scripts stay as strict as anywhere."""
    with app.test_request_context("/workspaces/w/agents/a/terminal"):
        allow_inline_styles()
        policy = page_policy_of(add_security_headers(app.response_class("<p>", mimetype="text/html")))
        assert policy["style-src"] == ["'self'", "'unsafe-inline'"]
        assert policy["script-src"] == ["'self'"]
    with app.test_request_context("/workspaces"):
        policy = page_policy_of(add_security_headers(app.response_class("<p>", mimetype="text/html")))
        assert policy["style-src"] == ["'self'"]


def test_sign_out_may_post_on_to_the_identity_provider(tmp_path: Path) -> None:
    """Sign-out is a form post that the server redirects to the provider's end-session endpoint, and Chromium
    checks form-action on that redirect too: the provider's origin is allowed once single sign-on is on."""
    with_sso = make_settings(
        tmp_path,
        "sqlite://",
        "unix:///nonexistent",
        oidc_issuer_url="https://idp.example.com/realms/main",
        oidc_client_id="slipway",
        oidc_icon_url="http://icons.example.net/sso.svg",
    )
    policy = directives(page_policy(with_sso))
    assert policy["form-action"] == ["'self'", "https://idp.example.com"]
    assert "http://icons.example.net" in policy["img-src"]  # an icon served over plain http still shows
    assert policy["script-src"] == ["'self'"]
