"""Subdomain apps: requests whose Host is under the wildcard access URL go to the app it names, not the dashboard.

The router runs before anything else of the request (CSRF, sign-in): an app host is the app's origin, where the
dashboard's forms, pages and cookies have no place. Every request for such a host ends here, with the app's
answer or an error page of ours; none falls through to the dashboard's routes.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from flask import Flask, current_app, g, jsonify, redirect, request
from flask.sessions import SecureCookieSessionInterface, SessionMixin
from werkzeug.wrappers import Response

from app.agents import app_tokens, proxy
from app.agents.app_views import proxy_to_app
from app.agents.apps import app_for_host, wildcard
from app.agents.hosts import AppHost, NotAnAppHost, parse_label
from app.auth.access import current_browser_session_id
from app.auth.blueprints import api_blueprint, page_blueprint
from app.core.errors import Forbidden, InvalidInput, NotFound, Unauthorized
from app.core.redis_client import get_redis
from app.core.signing import signer
from app.core.websocket import is_websocket_request
from app.users.models import User

api = api_blueprint("applications_api", __name__)
# Visited by the browser with the dashboard's session (a page, despite its path: it is Coder's).
bp = page_blueprint("applications", __name__)
AUTH_REDIRECT = "/api/v2/applications/auth-redirect"


class DashboardOnlySession(SecureCookieSessionInterface):
    """The dashboard's session cookie is never set on an app host (an error page there may still touch the
    session, for its CSRF token): the app's origin holds no cookie of the dashboard's, not even an empty one."""

    def should_set_cookie(self, app: Flask, session: SessionMixin) -> bool:
        return not g.get("app_host") and super().should_set_cookie(app, session)


def init_app(app: Flask) -> None:
    # First of all hooks: the CSRF check and the dashboard's sign-in must never see an app's requests.
    app.before_request_funcs.setdefault(None, []).insert(0, route_app_host)
    app.session_interface = DashboardOnlySession()


def route_app_host() -> Response | None:
    """The app's answer for a request to an app host; None for the dashboard's own requests."""
    pattern = wildcard()
    label = pattern.label_of(request.host) if pattern is not None else None
    if label is None:
        return None
    g.app_host = True
    try:
        host = parse_label(label)
    except NotAnAppHost as exc:
        raise NotFound("There is no app at this address.", detail=str(exc)) from None
    code = request.args.get(app_tokens.CODE_PARAMETER)
    if code is not None:
        return _trade_code(code, label)
    cookie = request.cookies.get(app_tokens.APP_SESSION_COOKIE, "")
    person = app_tokens.user_of_cookie(signer(), cookie, label) if cookie else None
    if person is not None and person.must_change_password:
        # Back through the dashboard, which asks for the new password first and then hands out a new code.
        return _sign_in(host)
    _as_requester(person)
    try:
        target = app_for_host(person, host)
    except Forbidden:
        return _sign_in(host)
    requested = proxy.own_host_request_path(request.environ)
    return proxy_to_app(person, target, requested, own_origin=True)


def _as_requester(person: User | None) -> None:
    """Live connections count against the person (app/core/limits.py reads the API user)."""
    if person is not None:
        g.api_user = person


def _sign_in(host: AppHost) -> Response:
    if request.method not in ("GET", "HEAD") or is_websocket_request(request.environ):
        raise Unauthorized("Sign in to open this app: load its page first.")
    settings = current_app.config["SLIPWAY_SETTINGS"]
    back = request.url
    return redirect(f"{settings.access_url}{AUTH_REDIRECT}?{urlencode({'redirect_uri': back})}")


def _trade_code(code: str, label: str) -> Response:
    grant = app_tokens.redeem_code(get_redis(), signer(), code, label)
    if grant is None:
        raise InvalidInput(
            "This sign-in link has expired or was used already.", detail="Open the app again from the dashboard."
        )
    # The address as the browser sent it (still percent-encoded), less the code: the app gets its own URL back.
    requested = proxy.own_host_request_path(request.environ)
    kept = [part for part in requested.query.split("&") if part and part.split("=", 1)[0] != app_tokens.CODE_PARAMETER]
    response = redirect("/" + requested.rest + (f"?{'&'.join(kept)}" if kept else ""))
    pattern = wildcard()
    response.set_cookie(
        app_tokens.APP_SESSION_COOKIE,
        app_tokens.session_cookie_value(signer(), grant),
        httponly=True,
        secure=pattern is not None and pattern.scheme == "https",
        samesite="Lax",
        path="/",
        # No Domain: the cookie belongs to this app host alone, never to its siblings or the dashboard.
    )
    return response


@bp.get(AUTH_REDIRECT)
def auth_redirect() -> Response:
    """Hand the signed-in browser to an app host with a one-time code for that host (Coder's endpoint)."""
    pattern = wildcard()
    target = request.args.get("redirect_uri", "")
    parts = urlsplit(target)
    label = pattern.label_of(parts.netloc) if pattern is not None and parts.scheme == pattern.scheme else None
    if pattern is None or label is None:
        raise InvalidInput("redirect_uri must be an app's address under the wildcard access URL.")
    try:
        parse_label(label)
    except NotAnAppHost as exc:
        raise InvalidInput(str(exc)) from None
    session_id = current_browser_session_id()
    if session_id is None:
        raise Forbidden("Sign in with the browser to open apps.")
    code = app_tokens.issue_code(get_redis(), signer(), session_id, label)
    query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), (app_tokens.CODE_PARAMETER, code)])
    return redirect(urlunsplit(parts._replace(query=query, fragment="")))


@api.get("/applications/host")
def host() -> Response:
    """Coder's ``GET /api/v2/applications/host``: the wildcard host apps are served on ("" without one)."""
    pattern = wildcard()
    return jsonify({"host": pattern.host if pattern is not None else ""})
