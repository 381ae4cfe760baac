"""The app proxy's pure rules: where the raw request target splits, and which cookies an app may set (the proxy
itself runs end to end in test_app_proxy_e2e.py)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import cast

import pytest
from flask import Flask

from app.agents.apps import AppTarget, sandboxed_for
from app.agents.proxy import SLIPWAY_COOKIES, AppRequestPath, app_request_path, is_credential_header, scoped_cookie
from app.users.models import User
from tests.conftest import PASSWORD
from tests.support.web import CSRF_PATTERN

pytestmark = pytest.mark.databases("sqlite")

ROUTE = ("alice", "ws.main", "dev")


@pytest.mark.parametrize("variable", ["RAW_URI", "REQUEST_URI"])  # gunicorn's, Werkzeug's
def test_the_apps_part_of_the_path_is_taken_as_sent(variable: str) -> None:
    environ = {variable: "/@alice/ws.main/apps/dev/a%3Fb/%2e%2e/c?x=%20y&z=%3F", "QUERY_STRING": "ignored"}
    assert app_request_path(environ, *ROUTE, "a?b/../c") == AppRequestPath(
        "/@alice/ws.main/apps/dev/", "a%3Fb/%2e%2e/c", "x=%20y&z=%3F"
    )


def test_the_prefix_is_kept_as_the_client_spelt_it() -> None:
    environ = {"RAW_URI": "/%40alice/ws.main/apps/d%65v/"}
    assert app_request_path(environ, *ROUTE, "") == AppRequestPath("/%40alice/ws.main/apps/d%65v/", "", "")


def test_an_absolute_form_request_target_is_split_after_its_authority() -> None:
    environ = {"RAW_URI": "http://slipway.example:3000/@alice/ws.main/apps/dev/x%2Fy?q"}
    assert app_request_path(environ, *ROUTE, "x/y") == AppRequestPath("/@alice/ws.main/apps/dev/", "x%2Fy", "q")


def test_raw_bytes_outside_ascii_are_percent_encoded() -> None:
    # WSGI strings carry the request's bytes as latin-1: "café" sent raw in UTF-8.
    environ = {"RAW_URI": "/@alice/ws.main/apps/dev/caf\xc3\xa9?n=\xc3\xa9"}
    assert app_request_path(environ, *ROUTE, "café") == AppRequestPath(
        "/@alice/ws.main/apps/dev/", "caf%C3%A9", "n=%C3%A9"
    )


def test_a_prefix_never_breaks_the_cookie_path_it_becomes() -> None:
    environ = {"RAW_URI": "/@alice/ws.main/apps/a;b,c/x;y"}
    assert app_request_path(environ, "alice", "ws.main", "a;b,c", "x;y") == AppRequestPath(
        "/@alice/ws.main/apps/a%3Bb%2Cc/", "x;y", ""
    )


@pytest.mark.parametrize(
    ("environ", "decoded_rest", "expected_rest"),
    [
        ({"QUERY_STRING": "q=%3F"}, "a?b/../c", "a%3Fb/../c"),  # another WSGI server: no raw target at all
        ({"RAW_URI": "/@alice/ws.main/apps/dev%2Fx/y?q=%3F"}, "x/y", "x/y"),  # split elsewhere than the route
    ],
)
def test_without_a_raw_target_that_fits_what_was_decoded_is_encoded_again(
    environ: dict[str, str], decoded_rest: str, expected_rest: str
) -> None:
    environ["QUERY_STRING"] = "q=%3F"
    assert app_request_path(environ, *ROUTE, decoded_rest) == AppRequestPath(
        "/@alice/ws.main/apps/dev/", expected_rest, "q=%3F"
    )


@pytest.mark.parametrize(
    "header",
    ["Authorization", "Proxy-Authorization", "Slipway-Session-Token", "coder-session-token", "Slipway-Agent-Token",
     "Slipway-Provisioner-PSK", "Slipway-Provisioner-Key", "Slipway-Provisioner-Daemon"],
)  # fmt: skip
def test_every_slipway_credential_header_is_withheld(header: str) -> None:
    assert is_credential_header(header)
    assert not is_credential_header("X-Requested-By")


PREFIX = "/@alice/ws.main/apps/dev/"


@pytest.mark.parametrize(
    "set_cookie",
    ["slipway_session=x", "session=x; Path=/", "remember_token=x", " Slipway_Session =x", "=slipway_session=x",
     "slipway_session", "=x", " =x"],
)  # fmt: skip
def test_an_app_may_not_set_slipways_cookies_or_nameless_ones(set_cookie: str) -> None:
    assert scoped_cookie(set_cookie, PREFIX) is None


def test_an_apps_cookies_are_confined_to_its_path() -> None:
    assert scoped_cookie("theme=dark", PREFIX) == f"theme=dark; Path={PREFIX}"
    assert (
        scoped_cookie("a=b=c; PATH=/; Domain=.example.com; Secure;HttpOnly; SameSite=Strict; path=/x", PREFIX)
        == f"a=b=c; Secure; HttpOnly; SameSite=Strict; Path={PREFIX}"
    )


@pytest.mark.usefixtures("personas")
def test_every_cookie_slipway_sets_is_one_an_app_neither_sees_nor_sets(app: Flask) -> None:
    browser = app.test_client()
    answers = [browser.get("/login")]
    token = CSRF_PATTERN.search(answers[0].get_data(as_text=True))
    assert token is not None
    form = {"email": "alice@example.com", "password": PASSWORD, "csrf_token": token.group(1)}
    answers += [browser.post("/login", data=form), browser.get("/workspaces"), browser.get("/account")]
    assert answers[1].status_code == 302  # signed in
    names = {cookie.split("=", 1)[0] for answer in answers for cookie in answer.headers.getlist("Set-Cookie")}
    assert names and names <= SLIPWAY_COOKIES, names
    assert app.config["SESSION_COOKIE_NAME"] in SLIPWAY_COOKIES
    assert app.config.get("REMEMBER_COOKIE_NAME", "remember_token") in SLIPWAY_COOKIES


def test_only_the_workspace_s_owner_leaves_the_sandbox_and_only_when_the_deployment_allows_it() -> None:
    # Plain stand-ins: the rule reads the workspace's owner id and the viewer's id, nothing else.
    target = cast(AppTarget, SimpleNamespace(workspace=SimpleNamespace(owner_id="alice-id")))
    alice, carol = cast(User, SimpleNamespace(id="alice-id")), cast(User, SimpleNamespace(id="carol-id"))
    assert sandboxed_for(target, alice, owner_same_origin=False)
    assert not sandboxed_for(target, alice, owner_same_origin=True)
    for viewer in (carol, None):  # whoever the app is shared with, signed in or not
        assert sandboxed_for(target, viewer, owner_same_origin=True)
