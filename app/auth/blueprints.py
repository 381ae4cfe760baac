"""Blueprint factories that make "signed in" the default: a route is public only when it is listed as such."""

from __future__ import annotations

from collections.abc import Iterable

from flask import Blueprint, redirect, request, url_for
from flask_login import current_user
from werkzeug.wrappers import Response

from app.auth.access import api_user, must_change_password_first, refuse_read_only, refuse_until_password_changed
from app.core.extensions import csrf, login_manager

API_PREFIX = "/api/v2"
# The API blueprints that take a user's token, by name, with their public endpoints: the OpenAPI document
# (app/apidocs) says from this which calls need which credential.
TOKEN_BLUEPRINTS: dict[str, frozenset[str]] = {}


def page_blueprint(name: str, import_name: str, *, public: Iterable[str] = ()) -> Blueprint:
    blueprint = Blueprint(name, import_name)
    public_endpoints = {f"{name}.{endpoint}" for endpoint in public}

    @blueprint.before_request
    def require_login() -> Response | None:
        if current_user.is_authenticated:
            user = current_user._get_current_object()
            if must_change_password_first(user):
                return redirect(url_for("auth.change_password", next=request.full_path.rstrip("?")))
            refuse_read_only(user)
            return None
        if request.endpoint in public_endpoints:
            return None
        response: Response = login_manager.unauthorized()
        return response

    return blueprint


def api_blueprint(name: str, import_name: str, *, public: Iterable[str] = ()) -> Blueprint:
    blueprint = Blueprint(name, import_name, url_prefix=API_PREFIX)
    public_endpoints = {f"{name}.{endpoint}" for endpoint in public}
    TOKEN_BLUEPRINTS[name] = frozenset(public_endpoints)
    # API calls authenticate with a bearer token, never the cookie, so cross-site forms cannot forge them.
    csrf.exempt(blueprint)

    @blueprint.before_request
    def require_token() -> None:
        if request.endpoint not in public_endpoints:
            user = api_user()
            refuse_until_password_changed(user)
            refuse_read_only(user)

    return blueprint
