"""A template's access list, as Coder's: ``GET/PATCH /templates/{id}/acl`` and ``/acl/available``. Only those who
administer the template read or change it (others get 403, or 404 when they may not even use it)."""

from __future__ import annotations

from collections.abc import Mapping

from flask import Response, jsonify, request

from app.auth.access import api_user
from app.auth.blueprints import api_blueprint
from app.catalog import acl, services
from app.catalog.models import Template
from app.core.errors import InvalidInput
from app.core.validation import json_body, query_int
from app.groups.presenter import group_json, reduced_user_json
from app.groups.services import member_counts
from app.organizations.services import get_organization
from protocol.codec import JSON, JsonObject

bp = api_blueprint("template_acl_api", __name__)


def acl_json(template: Template) -> JsonObject:
    """Coder's TemplateACL: ``users`` (each a user with its ``role``) and ``group`` (sic: Coder's key)."""
    entries = acl.template_acl(template)
    organization = get_organization(template.organization_id)
    counts = member_counts([group for group, _ in entries.groups])
    return {
        "users": [{**user.to_json(), "role": role} for user, role in entries.users],
        "group": [
            {**group_json(group, organization, member_count=counts[group.id]), "role": role}
            for group, role in entries.groups
        ],
    }


@bp.get("/templates/<template_id>/acl")
def get_acl(template_id: str) -> Response:
    return jsonify(acl_json(services.get_template_for(api_user(), template_id, "admin")))


@bp.patch("/templates/<template_id>/acl")
def update_acl(template_id: str) -> Response:
    """``{user_perms: {user_id: "use"|"admin"|""}, group_perms: {group_id: …}}``; ``""`` removes the entry."""
    template = services.get_template_for(api_user(), template_id, "admin")
    body = json_body()
    perms = {name: _perms(body, name) for name in ("user_perms", "group_perms")}
    acl.update_template_acl(template, perms["user_perms"], perms["group_perms"])
    return jsonify({"message": "Successfully updated template ACL list.", **acl_json(template)})


def _perms(body: Mapping[str, JSON], name: str) -> dict[str, str]:
    value = body.get(name, {})
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(role, str) for role in value.values()):
        raise InvalidInput("Invalid request.", validations=[{"field": name, "detail": "Must map ids to roles."}])
    return {str(key): str(role) for key, role in value.items()}


@bp.get("/templates/<template_id>/acl/available")
def available(template_id: str) -> Response:
    """Coder's ACLAvailable: ``users`` and ``groups`` of the template's organisation that could be added (``?q=``
    narrows by name, ``?limit=`` caps each list)."""
    template = services.get_template_for(api_user(), template_id, "admin")
    limit = query_int("limit", acl.AVAILABLE_LIMIT, minimum=1, maximum=1000)
    users, groups = acl.available(template, request.args.get("q", ""), limit)
    organization = get_organization(template.organization_id)
    counts = member_counts(groups)
    return jsonify(
        {
            "users": [reduced_user_json(user) for user in users],
            "groups": [group_json(group, organization, member_count=counts[group.id]) for group in groups],
        }
    )
