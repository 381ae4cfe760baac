"""Groups, as Coder's API: ``GET/POST /organizations/{org}/groups``, ``GET/PATCH/DELETE /groups/{id}``. The
organisation is given by id, by name, or as ``default``."""

from __future__ import annotations

from collections.abc import Mapping

from flask import Response, jsonify, request

from app.auth.access import api_user
from app.auth.blueprints import api_blueprint
from app.core.pagination import PageRequest, with_total
from app.core.validation import FieldErrors, json_body, string_field, whole_number_field
from app.groups import permissions, services
from app.groups.models import Group
from app.groups.presenter import group_json
from app.organizations.services import get_organization
from protocol.codec import JSON

bp = api_blueprint("groups_api", __name__)


@bp.get("/organizations/<organization>/groups")
def list_groups(organization: str) -> Response:
    """The organisation's groups (``?q=`` narrows by name), each with its member count; ``members`` stays empty
    (``GET /groups/{id}`` pages them). Those who do not manage groups see the groups they are in."""
    user, org = api_user(), get_organization(organization)
    query = services.groups_query(org.id, request.args.get("q", ""), member_id=permissions.listed_for(user, org.id))
    groups, total = PageRequest.from_args().rows(query)
    counts = services.member_counts(groups)
    return with_total(jsonify([group_json(group, org, member_count=counts[group.id]) for group in groups]), total)


@bp.post("/organizations/<organization>/groups")
def create_group(organization: str) -> tuple[Response, int]:
    permissions.require_manager(api_user())
    org = get_organization(organization)
    body, errors = json_body(), FieldErrors()
    name = string_field(body, "name", errors)
    display_name = string_field(body, "display_name", errors, required=False)
    avatar_url = string_field(body, "avatar_url", errors, required=False)
    quota = whole_number_field(body, "quota_allowance", errors)
    errors.raise_if_any()
    group = services.create_group(org, name, display_name, avatar_url, quota or 0)
    return jsonify(group_json(group, org, member_count=0)), 201


@bp.get("/organizations/<organization>/groups/<name>")
def group_by_name(organization: str, name: str) -> Response:
    org = get_organization(organization)
    return _one(permissions.get_group_for(api_user(), services.get_group_by_name(org.id, name)))


@bp.get("/groups/<group_id>")
def get_group(group_id: str) -> Response:
    """The group with one page of its members (``?limit=``, ``?offset=``, ``?q=`` by username or email)."""
    return _one(permissions.get_group_for(api_user(), services.get_group(group_id)))


def _one(group: Group) -> Response:
    members, total = PageRequest.from_args().rows(services.members_query(group, request.args.get("q", "")))
    org = get_organization(group.organization_id)
    return jsonify(group_json(group, org, member_count=total, members=members))


@bp.patch("/groups/<group_id>")
def update_group(group_id: str) -> Response:
    """Coder's PatchGroupRequest: ``name``, ``display_name``, ``avatar_url``, ``quota_allowance``, ``add_users``,
    ``remove_users`` (user ids), each optional."""
    user = api_user()
    permissions.require_manager(user)
    group = permissions.get_group_for(user, services.get_group(group_id))
    body, errors = json_body(), FieldErrors()
    changes = services.GroupChanges(
        name=_optional_string(body, "name", errors),
        display_name=_optional_string(body, "display_name", errors),
        avatar_url=_optional_string(body, "avatar_url", errors),
        quota_allowance=whole_number_field(body, "quota_allowance", errors),
        add_users=_ids(body, "add_users", errors),
        remove_users=_ids(body, "remove_users", errors),
    )
    errors.raise_if_any()
    services.update_group(group, changes)
    return _one(group)


@bp.delete("/groups/<group_id>")
def delete_group(group_id: str) -> Response:
    user = api_user()
    permissions.require_manager(user)
    services.delete_group(permissions.get_group_for(user, services.get_group(group_id)))
    return jsonify({"message": "Group deleted."})


def _optional_string(body: Mapping[str, JSON], name: str, errors: FieldErrors) -> str | None:
    if body.get(name) is None:
        return None
    return string_field(body, name, errors, required=False)


def _ids(body: Mapping[str, JSON], name: str, errors: FieldErrors) -> list[str]:
    value = body.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        errors.add(name, "Must be a list of user ids.")
        return []
    return [str(item) for item in value]
