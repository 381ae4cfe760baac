"""A workspace's sharing list, as Coder's: ``GET/PATCH /api/v2/workspaces/{id}/acl``. Whoever may see the
workspace reads it; only its owner (and deployment owners) change it, so a share never hands on more sharing."""

from __future__ import annotations

from collections.abc import Mapping

from flask import Response, jsonify

from app.auth.access import api_user
from app.auth.blueprints import api_blueprint
from app.core.errors import InvalidInput
from app.core.validation import json_body
from app.groups.models import Group
from app.users.models import User
from app.workspaces import services, sharing
from app.workspaces.models import Workspace
from protocol.codec import JSON, JsonObject

bp = api_blueprint("workspace_sharing_api", __name__)


def shared_user_json(user: User, role: str) -> JsonObject:
    """Coder's WorkspaceUser: the person, reduced, with their role."""
    return {"id": user.id, "username": user.username, "name": "", "avatar_url": "", "role": role}


def shared_group_json(group: Group, role: str) -> JsonObject:
    return {
        "id": group.id,
        "name": group.name,
        "display_name": group.display_name,
        "organization_id": group.organization_id,
        "avatar_url": group.avatar_url,
        "quota_allowance": group.quota_allowance,
        "source": group.source,
        "role": role,
    }


def sharing_json(workspace: Workspace) -> JsonObject:
    """Coder's WorkspaceACL: ``users`` and ``group`` (sic: Coder's key), each entry with its ``role``."""
    entries = sharing.sharing_list(workspace)
    return {
        "users": [shared_user_json(user, role) for user, role in entries.users],
        "group": [shared_group_json(group, role) for group, role in entries.groups],
    }


@bp.get("/workspaces/<workspace_id>/acl")
def get_acl(workspace_id: str) -> Response:
    return jsonify(sharing_json(services.get_workspace_for(api_user(), workspace_id)))


@bp.patch("/workspaces/<workspace_id>/acl")
def update_acl(workspace_id: str) -> tuple[str, int]:
    """``{user_roles: {user_id: "use"|"admin"|""}, group_roles: {group_id: …}}``; ``""`` removes the entry.
    204, as Coder's; open connections that a removal no longer allows are closed before it answers."""
    workspace = services.get_workspace_for(api_user(), workspace_id, need="share")
    body = json_body()
    sharing.update_sharing(workspace, _roles(body, "user_roles"), _roles(body, "group_roles"))
    return "", 204


def _roles(body: Mapping[str, JSON], name: str) -> dict[str, str]:
    value = body.get(name, {})
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(role, str) for role in value.values()):
        raise InvalidInput("Invalid request.", validations=[{"field": name, "detail": "Map ids to roles."}])
    return {str(key): str(role) for key, role in value.items()}
