"""Who is asking: the browser session for pages, a bearer token for the API; and role guards for both."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from flask import Flask, current_app, g, redirect, request, session, url_for
from flask_login import current_user, login_user, logout_user
from werkzeug.wrappers import Response

from app.audit.recorder import ACTION_LOGIN, ACTION_LOGOUT, change, record, user_actor
from app.core.errors import Forbidden, Unauthorized
from app.core.extensions import db, login_manager
from app.users.browser_sessions import end_browser_session, resolve_browser_session, start_browser_session
from app.users.models import ROLE_OWNER, User
from app.users.tokens import resolve_token

P = ParamSpec("P")
R = TypeVar("R")
# Where flask-login keeps the id it hands back to the user loader. Ours is the browser session's credential rather
# than the user's id, so that each browser can be signed out on its own (app/auth/browser_sessions.py).
LOGIN_ID_KEY = "_user_id"
# Methods that read: what an auditor may send anywhere an owner may.
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Signing in and out changes nothing of the deployment: a read-only person may do both, and change their password.
READ_ONLY_MAY_POST = frozenset(
    {
        "auth.login",
        "auth.logout",
        "auth.logout_everywhere",
        "users_api.login",
        "users_api.logout",
        # Their own password only (another's needs the user admin role): an auditor must be able to choose theirs.
        "auth.change_password",
        "users.change_password",
        "users_api.change_password",
    }
)


# All a person whose password an admin chose may reach until they choose their own (and sign-out).
PASSWORD_CHANGE_MAY = frozenset(
    {
        "auth.change_password",
        "auth.logout",
        "auth.logout_everywhere",
        "users_api.change_password",
        "users_api.logout",
        "users_api.me",
    }
)
CHANGE_YOURS_FIRST = (
    "You must choose a new password before using Slipway: an administrator set your current one. "
    "Change it on the dashboard, or with PUT /api/v2/users/me/password {old_password, password}."
)


def init_app(app: Flask) -> None:
    login_manager.init_app(app)
    login_manager.login_view = "auth.login"
    login_manager.login_message = "Sign in to continue."
    login_manager.login_message_category = "info"
    # "strong" protection would sign people out when their IP changes (mobile, VPN); server-side sessions that
    # sign-out deletes cover theft.
    login_manager.session_protection = "basic"
    login_manager.user_loader(load_session_user)
    login_manager.unauthorized_handler(_unauthorized)


def load_session_user(credential: str) -> User | None:
    """The user behind a browser session, unless it was signed out, expired or ended (password change, suspension)."""
    browser_session = resolve_browser_session(credential)
    if browser_session is None:
        return None
    g.browser_session_id = browser_session.id
    user: User = browser_session.user
    return user


def sign_in_browser(user: User, method: str = "password") -> None:
    """Start a server-side session for ``user`` and hand its credential to this browser's cookie; the sign-in's
    audit entry commits with the session."""
    record_sign_in(user, method)
    credential = start_browser_session(
        user,
        lifetime_seconds=current_app.config["SLIPWAY_SETTINGS"].session_duration,
        user_agent=request.user_agent.string,
    )
    login_user(user)
    session[LOGIN_ID_KEY] = credential


def sign_out_browser() -> None:
    """End this browser's session on the server (a copy of its cookie stops working too), then forget it here.

    The session is looked up first, so that whoever listens for the sign-out (Git links under way) knows which."""
    current_browser_session_id()
    user = current_user._get_current_object()
    if user.is_authenticated:
        record("user", user.id, user.username, ACTION_LOGOUT, actor=user_actor(user))
    credential = session.get(LOGIN_ID_KEY)
    if isinstance(credential, str):
        end_browser_session(credential)
    db.session.commit()
    logout_user()


def current_browser_session_id() -> str | None:
    """The id of the session this request came with (to mark "this browser" among a person's sessions)."""
    current_user._get_current_object()
    session_id: str | None = g.get("browser_session_id")
    return session_id


def _unauthorized() -> Response:
    return redirect(url_for("auth.login", next=request.full_path.rstrip("?")))


def bearer_token() -> str | None:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        return token.strip()
    return request.headers.get("Slipway-Session-Token") or request.headers.get("Coder-Session-Token")


def api_user() -> User:
    """The user behind the request's bearer token (cached on ``g``), or :class:`Unauthorized`."""
    cached: User | None = g.get("api_user")
    if cached is not None:
        return cached
    token = bearer_token()
    if token is None:
        raise Unauthorized("You must be signed in: send Authorization: Bearer <token>.")
    user = resolve_token(token)
    g.api_user = user
    return user


def page_user() -> User:
    user: User = current_user._get_current_object()
    return user


def require_role(*roles: str) -> Callable[[Callable[P, R]], Callable[P, R]]:
    """Guard a view: pages use the session user, API views the bearer user; others get 403."""

    def decorator(view: Callable[P, R]) -> Callable[P, R]:
        @wraps(view)
        def wrapped(*args: P.args, **kwargs: P.kwargs) -> R:
            user = api_user() if request.path.startswith("/api/") else page_user()
            if not (user.has_role(*roles) or _audits(user, roles)):
                raise Forbidden("You do not have permission to do that.")
            return view(*args, **kwargs)

        return wrapped

    return decorator


def _audits(user: User, roles: tuple[str, ...]) -> bool:
    """An auditor reads whatever owners may read (their writes never get this far: :func:`refuse_read_only`)."""
    return ROLE_OWNER in roles and user.is_auditor and request.method in READ_METHODS


def refuse_read_only(user: User) -> None:
    """The one place an auditor's writes are refused: every page and API blueprint calls it once it knows who is
    asking, before any view runs, so that no route can forget."""
    if user.is_read_only and request.method not in READ_METHODS and request.endpoint not in READ_ONLY_MAY_POST:
        raise Forbidden("Auditors read; they change nothing.")


def must_change_password_first(user: User) -> bool:
    """Whether this request is one that a person who must first change their password may not make."""
    return user.must_change_password and request.endpoint not in PASSWORD_CHANGE_MAY


def refuse_until_password_changed(user: User) -> None:
    """The API's side of the forced password change (pages are sent to the change-password page instead)."""
    if must_change_password_first(user):
        raise Forbidden(CHANGE_YOURS_FIRST)


def record_sign_in(user: User, method: str) -> None:
    """A sign-in's audit entry (password or OIDC, browser or API), in the caller's transaction."""
    diff = {"login_type": change(method)}
    record("user", user.id, user.username, ACTION_LOGIN, diff, actor=user_actor(user))


def record_failed_sign_in(attempted: str, method: str, status: int, reason: str) -> None:
    """A refused sign-in, committed on its own (nothing else of the request will be)."""
    diff = {"login_type": change(method), "reason": change(reason)}
    record("user", "", attempted[:256], ACTION_LOGIN, diff, status_code=status)
    db.session.commit()
