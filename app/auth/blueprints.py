"""Blueprint factories that make "signed in" the default: a route is public only when it is listed as such."""

from __future__ import annotations

from collections.abc import Iterable

from flask import Blueprint, request
from flask_login import current_user
from werkzeug.wrappers import Response

from app.auth.access import api_user, refuse_read_only
from app.core.extensions import csrf, login_manager

API_PREFIX = "/api/v2"


def page_blueprint(name: str, import_name: str, *, public: Iterable[str] = ()) -> Blueprint:
    blueprint = Blueprint(name, import_name)
    public_endpoints = {f"{name}.{endpoint}" for endpoint in public}

    @blueprint.before_request
    def require_login() -> Response | None:
        if current_user.is_authenticated:
            refuse_read_only(current_user._get_current_object())
            return None
        if request.endpoint in public_endpoints:
            return None
        response: Response = login_manager.unauthorized()
        return response

    return blueprint


def api_blueprint(name: str, import_name: str, *, public: Iterable[str] = ()) -> Blueprint:
    blueprint = Blueprint(name, import_name, url_prefix=API_PREFIX)
    public_endpoints = {f"{name}.{endpoint}" for endpoint in public}
    # API calls authenticate with a bearer token, never the cookie, so cross-site forms cannot forge them.
    csrf.exempt(blueprint)

    @blueprint.before_request
    def require_token() -> None:
        if request.endpoint not in public_endpoints:
            refuse_read_only(api_user())

    return blueprint
