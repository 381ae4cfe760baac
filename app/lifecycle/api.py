"""API.md "Workspace lifecycle": schedules, autostop, extend, dormancy, automatic updates, template settings and
quiet hours."""

from __future__ import annotations

from flask import Response, jsonify

from app.auth.access import api_user, require_role
from app.auth.blueprints import api_blueprint
from app.catalog.services import get_template_for
from app.core.columns import rfc3339
from app.core.validation import json_body
from app.lifecycle import settings
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN
from app.workspaces.api import workspace_json
from app.workspaces.models import Workspace
from app.workspaces.services import get_workspace_for

bp = api_blueprint("lifecycle_api", __name__)


def _workspace_to_change(workspace_id: str) -> Workspace:
    return get_workspace_for(api_user(), workspace_id, need="act")


@bp.put("/workspaces/<workspace_id>/autostart")
def set_autostart(workspace_id: str) -> tuple[str, int]:
    body = json_body()
    settings.set_autostart(_workspace_to_change(workspace_id), body.get("schedule"))
    return "", 204


@bp.put("/workspaces/<workspace_id>/ttl")
def set_ttl(workspace_id: str) -> tuple[str, int]:
    settings.set_ttl(_workspace_to_change(workspace_id), json_body().get("ttl_ms"))
    return "", 204


@bp.put("/workspaces/<workspace_id>/autoupdates")
def set_automatic_updates(workspace_id: str) -> tuple[str, int]:
    settings.set_automatic_updates(_workspace_to_change(workspace_id), json_body().get("automatic_updates"))
    return "", 204


@bp.put("/workspaces/<workspace_id>/extend")
def extend(workspace_id: str) -> Response:
    deadline = settings.extend_deadline(_workspace_to_change(workspace_id), json_body().get("deadline"))
    return jsonify({"deadline": rfc3339(deadline)})


@bp.put("/workspaces/<workspace_id>/dormant")
def set_dormant(workspace_id: str) -> Response:
    user = api_user()
    # Template admins look after dormancy (reference §2.4); the owner may wake their own workspace.
    workspace = get_workspace_for(
        user, workspace_id, need="read" if user.is_template_admin or user.is_auditor else "act"
    )
    settings.set_dormant(workspace, json_body().get("dormant"))
    return jsonify(workspace_json(workspace, viewer=user))


@bp.patch("/templates/<template_id>")
def update_template(template_id: str) -> Response:
    template = get_template_for(api_user(), template_id, "admin")
    return jsonify(settings.update_template(template, json_body()).to_json())


@bp.get("/workspaces/lifecycle-upcoming")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def upcoming() -> Response:
    """Admins: which workspaces go dormant next, and which dormant ones are deleted next."""
    return jsonify(settings.upcoming())


@bp.get("/users/me/quiet-hours")
def quiet_hours() -> Response:
    return jsonify({"schedule": settings.quiet_hours_of(api_user())})


@bp.put("/users/me/quiet-hours")
def set_quiet_hours() -> Response:
    user = api_user()
    settings.set_quiet_hours(user, json_body().get("schedule"))
    return jsonify({"schedule": settings.quiet_hours_of(user)})
