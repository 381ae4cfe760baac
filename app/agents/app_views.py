"""Path-based apps: ``/@<owner>/<workspace>[.<agent>]/apps/<slug>/…`` proxied to the app inside the workspace."""

from __future__ import annotations

from flask import Blueprint, current_app, redirect, request, url_for
from flask_login import current_user
from werkzeug.wrappers import Response

from app.agents import connections, proxy
from app.agents.access import AgentContext, ensure_reachable
from app.agents.app_connections import AppUnavailable, PoolKey, connection_pool
from app.agents.apps import AppTarget, app_for, sandboxed_for
from app.agents.tunnels import Holder
from app.auth.access import CHANGE_YOURS_FIRST, api_user, bearer_token, must_change_password_first, page_user
from app.core.errors import BadGateway, Conflict, Forbidden, NotFound
from app.core.extensions import csrf, db
from app.core.limits import live_connection, until_closed
from app.core.redis_client import get_redis
from app.core.signing import signer
from app.core.websocket import is_websocket_request
from app.lifecycle import activity
from app.users.models import User

bp = Blueprint("apps", __name__)
# The app checks its own forms; Slipway's CSRF token means nothing to it (and its cookie is not forwarded).
csrf.exempt(bp)

METHODS = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]
APP_ROOT = "/@<owner>/<workspace_and_agent>/apps/<slug>"


def viewer() -> User | None:
    """Who is asking, if anyone: the dashboard's session, or a bearer token (scripts, the CLI)."""
    if bearer_token() is not None:
        return api_user()
    return page_user() if current_user.is_authenticated else None


@bp.route(APP_ROOT, methods=METHODS, provide_automatic_options=False)
def app_root(owner: str, workspace_and_agent: str, slug: str) -> Response:
    """Apps resolve relative links against a trailing slash."""
    query = f"?{request.query_string.decode('latin-1')}" if request.query_string else ""
    return redirect(request.path + "/" + query, code=308)


@bp.route(APP_ROOT + "/", methods=METHODS, provide_automatic_options=False)
@bp.route(APP_ROOT + "/<path:rest>", methods=METHODS, provide_automatic_options=False)
def serve_app(owner: str, workspace_and_agent: str, slug: str, rest: str = "") -> Response:
    if current_app.config["SLIPWAY_SETTINGS"].disable_path_apps:
        raise NotFound("Path-based apps are turned off on this server (--disable-path-apps).")
    person = viewer()
    if person is not None and must_change_password_first(person):
        # As anywhere else on the dashboard: the password an administrator chose opens nothing but its change.
        if bearer_token() is not None:
            raise Forbidden(CHANGE_YOURS_FIRST)
        return redirect(url_for("auth.change_password", next=request.full_path.rstrip("?")))
    try:
        target = app_for(person, owner, workspace_and_agent, slug)
    except Forbidden:
        return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))
    requested = proxy.app_request_path(request.environ, owner, workspace_and_agent, slug, rest)
    return proxy_to_app(person, target, requested, own_origin=False)


def proxy_to_app(
    person: User | None, target: AppTarget, requested: proxy.AppRequestPath, *, own_origin: bool
) -> Response:
    """Carry ``person``'s request (None: signed out, for a public app) to the app, for path apps and subdomain apps
    alike. ``own_origin``: the app has a host of its own (a subdomain app), so its pages need no sandbox to keep
    them from the dashboard."""
    try:
        ensure_reachable(AgentContext(target.agent, target.build, target.workspace))
    except Conflict as exc:
        raise BadGateway(f"App {target.name} is not reachable.", detail=exc.message) from exc
    # App traffic counts as use (dormancy) but does not move the autostop (reference §2.4).
    activity.mark_requested(target.workspace.id)
    settings = current_app.config["SLIPWAY_SETTINGS"]
    # An app on a host of its own needs no sandbox; a path app shares the dashboard's origin and gets one.
    sandbox = not own_origin and sandboxed_for(
        target, person, owner_same_origin=settings.dangerous_allow_path_app_same_origin
    )
    client, signing = get_redis(), signer()
    # An app only its workspace's users may open is held by the viewer: removing their share closes it at once.
    holder = Holder(person.id, target.workspace.id) if person is not None and target.share == "owner" else None
    db.session.remove()  # the response may stream for long: hold no database connection
    # After the remove: its commit must not expire the rows the proxy reads below (they are detached now).
    connections.app_used(client, person, target)
    # A live connection (app/core/limits.py) until the app's answer has been passed on: it may stream for hours.
    with live_connection():
        try:
            if is_websocket_request(request.environ):
                return proxy.proxy_websocket(client, signing, target, request, requested, holder)
            # Connections are kept per person (and holder): never one person's request on another's connection.
            key = PoolKey.of(target, person.id if person is not None else "", holder)
            pool = connection_pool()
            response = proxy.proxy_http(
                client, signing, target, request, requested, pool=pool, key=key, sandbox=sandbox
            )
            return until_closed(response)
        except AppUnavailable as exc:
            raise BadGateway(f"App {target.name} is not reachable.", detail=str(exc).capitalize() + ".") from exc


# The same paths take WebSocket upgrades (Werkzeug matches those only against rules marked websocket).
bp.add_url_rule(APP_ROOT + "/", endpoint="serve_app_websocket", view_func=serve_app, websocket=True)
bp.add_url_rule(APP_ROOT + "/<path:rest>", endpoint="serve_app_websocket_path", view_func=serve_app, websocket=True)
