"""Effective permissions: ``POST /authcheck`` (Coder's shape) and ``GET /users/{user}/permissions?template=``."""

from __future__ import annotations

from flask import Response, jsonify, request

from app.accounts import permissions
from app.auth.access import api_user
from app.auth.blueprints import api_blueprint
from app.catalog import access as template_access
from app.core.errors import Forbidden, NotFound
from app.core.validation import json_body
from app.users import services as users
from app.users.models import User
from protocol.codec import JsonObject

bp = api_blueprint("permissions_api", __name__)


@bp.post("/authcheck")
def authcheck() -> Response:
    """``{checks: {key: {object: {resource_type, resource_id?}, action}}}`` → ``{key: bool}`` for the caller."""
    user = api_user()
    checks = permissions.parse_checks(json_body())
    return jsonify({key: permissions.allowed(user, check) for key, check in checks.items()})


@bp.get("/users/<user_ref>/permissions")
def user_permissions(user_ref: str) -> Response:
    """What ``me`` (or, for owners and user admins, anyone) may do: site-wide, and on ``?template=`` (id or name)."""
    caller = api_user()
    subject = _subject(caller, user_ref)
    body: JsonObject = {
        "user_id": subject.id,
        "username": subject.username,
        "roles": list(subject.all_roles),
        "site": dict(permissions.site_permissions(subject)),
    }
    reference = request.args.get("template", "").strip()
    if reference:
        template = permissions.find_template(reference)
        # Asked about a template the caller may not use: it does not exist for them.
        if template is None or not template_access.may(caller, template, "use"):
            raise NotFound(f"No template {reference!r}.")
        body["template"] = permissions.template_permissions(subject, template)
    return jsonify(body)


def _subject(caller: User, reference: str) -> User:
    if reference in ("me", caller.id, caller.username):
        return caller
    if not caller.is_user_admin:
        raise Forbidden("Only owners and user admins read other people's permissions.")
    return users.get_user_by_reference(reference)
