"""IdP sync settings, as Coder's: ``GET/PATCH /api/v2/organizations/{org}/settings/idpsync/groups`` and ``/roles``
(``{org}``: its id or its name). Owners only: whoever sets the mapping decides who gets which roles."""

from __future__ import annotations

from flask import Response, jsonify

from app.auth.access import require_role
from app.auth.blueprints import api_blueprint
from app.core.validation import json_body
from app.groups import sync
from app.organizations.services import get_organization
from app.users.models import ROLE_OWNER

bp = api_blueprint("idpsync_api", __name__)


@bp.get("/organizations/<org>/settings/idpsync/groups")
@require_role(ROLE_OWNER)
def get_group_sync(org: str) -> Response:
    return jsonify(sync.group_sync_of(get_organization(org)).to_json())


@bp.patch("/organizations/<org>/settings/idpsync/groups")
@require_role(ROLE_OWNER)
def update_group_sync(org: str) -> Response:
    """The whole settings object: ``{field, mapping: {idp_group: [group_id]}, regex_filter,
    auto_create_missing_groups}``; ``field: ""`` turns group sync off."""
    return jsonify(sync.update_group_sync(get_organization(org), json_body()).to_json())


@bp.get("/organizations/<org>/settings/idpsync/roles")
@require_role(ROLE_OWNER)
def get_role_sync(org: str) -> Response:
    return jsonify(sync.role_sync_of(get_organization(org)).to_json())


@bp.patch("/organizations/<org>/settings/idpsync/roles")
@require_role(ROLE_OWNER)
def update_role_sync(org: str) -> Response:
    """``{field, mapping: {idp_role: ["owner"|"user-admin"|"template-admin"]}}``; ``field: ""`` turns it off."""
    return jsonify(sync.update_role_sync(get_organization(org), json_body()).to_json())
