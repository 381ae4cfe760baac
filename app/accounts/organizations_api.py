"""Organisations, as Coder's API: ``GET/POST /organizations``, ``GET/PATCH/DELETE /organizations/{org}``,
``GET /organizations/{org}/members``, ``POST/DELETE /organizations/{org}/members/{user}`` and
``PUT /organizations/{org}/members/{user}/roles``. ``{org}`` is an id, a name or ``default``; ``{user}`` an id, a
username or ``me``."""

from __future__ import annotations

from flask import Response, jsonify, request

from app.accounts import organizations as services
from app.auth.access import api_user
from app.auth.blueprints import api_blueprint
from app.core.columns import rfc3339
from app.core.pagination import PageRequest, with_total
from app.core.validation import message_body
from app.organizations.models import OrganizationMember
from app.users.models import User
from app.users.services import get_user_by_reference
from protocol.codec import JsonObject
from protocol.publicapi import CreateOrganizationRequest, UpdateMemberRolesRequest, UpdateOrganizationRequest

bp = api_blueprint("organizations_api", __name__)


@bp.get("/organizations")
def list_organizations() -> Response:
    """The organisations the caller belongs to (every one, for owners, auditors and user admins)."""
    return jsonify([organization.to_json() for organization in services.organizations_for(api_user())])


@bp.post("/organizations")
def create_organization() -> tuple[Response, int]:
    actor = api_user()
    services.require_owner(actor)
    body = message_body(CreateOrganizationRequest)
    fields = services.OrganizationFields(body.name, body.display_name, body.description, body.icon)
    return jsonify(services.create_organization(actor, fields).to_json()), 201


@bp.get("/organizations/<org>")
def get_organization(org: str) -> Response:
    return jsonify(services.get_organization_for(api_user(), org).to_json())


@bp.patch("/organizations/<org>")
def update_organization(org: str) -> Response:
    organization = services.get_organization_for(api_user(), org, "owner")
    body = message_body(UpdateOrganizationRequest)
    fields = services.OrganizationFields(body.name, body.display_name, body.description, body.icon)
    return jsonify(services.update_organization(organization, fields).to_json())


@bp.delete("/organizations/<org>")
def delete_organization(org: str) -> Response:
    services.delete_organization(services.get_organization_for(api_user(), org, "owner"))
    return jsonify({"message": "Organization deleted."})


@bp.get("/organizations/<org>/members")
def list_members(org: str) -> Response:
    """The members with who they are and their roles, by username (``?q=`` narrows by username or email;
    ``?limit=``/``?offset=`` page, ``X-Total-Count`` says how many)."""
    organization = services.get_organization_for(api_user(), org)
    users, total = PageRequest.from_args().rows(services.members_query(organization, request.args.get("q", "")))
    rows = services.memberships(organization, users)
    return with_total(jsonify([_member_with_user_json(rows[user.id], user) for user in users]), total)


@bp.post("/organizations/<org>/members/<user>")
def add_member(org: str, user: str) -> tuple[Response, int]:
    actor = api_user()
    organization = services.get_organization_for(actor, org, "members")
    return jsonify(_member_json(services.add_member(organization, _person(actor, user)))), 201


@bp.delete("/organizations/<org>/members/<user>")
def remove_member(org: str, user: str) -> tuple[str, int]:
    actor = api_user()
    organization = services.get_organization_for(actor, org, "members")
    services.remove_member(actor, organization, _person(actor, user))
    return "", 204


@bp.put("/organizations/<org>/members/<user>/roles")
def update_member_roles(org: str, user: str) -> Response:
    actor = api_user()
    organization = services.get_organization_for(actor, org, "members")
    body = message_body(UpdateMemberRolesRequest)
    return jsonify(_member_json(services.set_member_roles(actor, organization, _person(actor, user), body.roles)))


def _person(actor: User, reference: str) -> User:
    return actor if reference == "me" else get_user_by_reference(reference)


def _roles_json(roles: list[str], organization_id: str = "") -> list[JsonObject]:
    """Coder's SlimRole: the name, a name for people ("organization-user-admin" -> "Organization User Admin")."""
    return [
        {"name": role, "display_name": role.replace("-", " ").title(), "organization_id": organization_id}
        for role in roles
    ]


def _member_json(membership: OrganizationMember) -> JsonObject:
    return {
        "user_id": membership.user_id,
        "organization_id": membership.organization_id,
        "roles": list(_roles_json(membership.roles, membership.organization_id)),
        "created_at": rfc3339(membership.created_at),
        "updated_at": rfc3339(membership.updated_at),
    }


def _member_with_user_json(membership: OrganizationMember, user: User) -> JsonObject:
    """Coder's OrganizationMemberWithUserData."""
    return {
        **_member_json(membership),
        "username": user.username,
        "name": "",
        "email": user.email,
        "status": user.status,
        "login_type": user.login_type,
        "avatar_url": "",
        "last_seen_at": rfc3339(user.last_seen_at),
        "user_created_at": rfc3339(user.created_at),
        "user_updated_at": rfc3339(user.updated_at),
        "global_roles": list(_roles_json(user.all_roles)),
    }
