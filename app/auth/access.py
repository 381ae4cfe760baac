"""Who is asking: the browser session for pages, a bearer token for the API; and role guards for both."""

from __future__ import annotations

from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from flask import Flask, g, redirect, request, url_for
from flask_login import current_user
from werkzeug.wrappers import Response

from app.core.errors import Forbidden, Unauthorized
from app.core.extensions import db, login_manager
from app.users.models import User
from app.users.tokens import resolve_token

P = ParamSpec("P")
R = TypeVar("R")


def init_app(app: Flask) -> None:
    login_manager.init_app(app)
    login_manager.login_view = "auth.login"
    login_manager.login_message = "Sign in to continue."
    login_manager.login_message_category = "info"
    # "strong" protection would sign people out when their IP changes (mobile, VPN); the nonce covers theft.
    login_manager.session_protection = "basic"
    login_manager.user_loader(load_session_user)
    login_manager.unauthorized_handler(_unauthorized)


def load_session_user(session_id: str) -> User | None:
    """The user behind a browser session, unless it was ended by a password change or suspension."""
    user_id, _, nonce = session_id.partition(":")
    user = db.session.get(User, user_id)
    if user is None or user.session_nonce != nonce or not user.is_active:
        return None
    return user


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
            if not user.has_role(*roles):
                raise Forbidden("You do not have permission to do that.")
            return view(*args, **kwargs)

        return wrapped

    return decorator
