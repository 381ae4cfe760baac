"""The Organisations pages: the organisations one may see (owners create, change and delete them) and one
organisation's members with their roles there (its managers add, remove and change roles). The same services and
rules as the API (app/accounts/organizations.py)."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from app.accounts import organizations as services
from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.core.errors import DomainError, InvalidInput
from app.core.pagination import page_of, requested_page
from app.organizations.models import ORG_ROLES
from app.users.services import get_user_by_reference

bp = page_blueprint("organizations", __name__)
FIELDS = ("name", "display_name", "description", "icon")


def _field_errors(error: DomainError) -> dict[str, str]:
    return {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}


def _fields() -> services.OrganizationFields:
    return services.OrganizationFields(*(request.form.get(key) for key in FIELDS))


@bp.get("/organizations")
def index() -> str:
    return _index_page()


def _index_page(form: dict[str, str] | None = None, errors: dict[str, str] | None = None) -> str:
    user = page_user()
    return render_template(
        "organizations/index.html",
        organizations=services.organizations_for(user),
        form=form or dict.fromkeys(FIELDS, ""),
        errors=errors or {},
        may_create=user.is_owner,
    )


@bp.post("/organizations/create")
def create() -> str | tuple[str, int] | Response:
    user = page_user()
    services.require_owner(user)
    try:
        organization = services.create_organization(user, _fields())
    except DomainError as error:
        form = {key: request.form.get(key, "") for key in FIELDS}
        return _index_page(form, _field_errors(error)), error.status
    flash(f"Created organisation {organization.name}.", "success")
    return redirect(url_for("organizations.show", org=organization.name))


@bp.get("/organizations/<org>")
def show(org: str) -> str:
    return _organization_page(org)


def _organization_page(org: str, errors: dict[str, str] | None = None) -> str:
    user = page_user()
    organization = services.get_organization_for(user, org)
    search = request.args.get("q", "").strip()
    members = page_of(services.members_query(organization, search), requested_page(), endpoint="organizations.show")
    membership = services.memberships(organization, [user]).get(user.id)
    return render_template(
        "organizations/show.html",
        organization=organization,
        members=members,
        roles=services.memberships(organization, members.rows),
        all_roles=ORG_ROLES,
        search=search,
        errors=errors or {},
        may_manage=services.may_manage_members(user, membership),
        may_change=user.is_owner,
    )


@bp.post("/organizations/<org>/edit")
def edit(org: str) -> str | tuple[str, int] | Response:
    organization = services.get_organization_for(page_user(), org, "owner")
    try:
        services.update_organization(organization, _fields())
    except DomainError as error:
        return _organization_page(org, _field_errors(error)), error.status
    flash(f"Saved organisation {organization.name}.", "success")
    return redirect(url_for("organizations.show", org=organization.name))


@bp.post("/organizations/<org>/delete")
def delete(org: str) -> Response:
    organization = services.get_organization_for(page_user(), org, "owner")
    try:
        services.delete_organization(organization)
    except DomainError as error:
        flash(error.message, "error")
        return redirect(url_for("organizations.show", org=organization.name))
    flash(f"Deleted organisation {organization.name}.", "success")
    return redirect(url_for("organizations.index"))


@bp.post("/organizations/<org>/members")
def add_member(org: str) -> str | tuple[str, int] | Response:
    organization = services.get_organization_for(page_user(), org, "members")
    username = request.form.get("username", "").strip()
    try:
        if not username:
            raise InvalidInput("Type a username.", validations=[{"field": "username", "detail": "Type a username."}])
        person = get_user_by_reference(username)
        services.add_member(organization, person)
    except DomainError as error:
        return _organization_page(org, {"username": error.message}), error.status
    flash(f"Added {person.username} to {organization.name}.", "success")
    return redirect(url_for("organizations.show", org=organization.name))


@bp.post("/organizations/<org>/members/<user>/roles")
def set_roles(org: str, user: str) -> Response:
    actor = page_user()
    organization = services.get_organization_for(actor, org, "members")
    try:
        person = get_user_by_reference(user)
        services.set_member_roles(actor, organization, person, request.form.getlist("roles"))
        flash(f"Saved {person.username}'s roles in {organization.name}.", "success")
    except DomainError as error:
        flash(error.message, "error")
    return redirect(url_for("organizations.show", org=organization.name))


@bp.post("/organizations/<org>/members/<user>/remove")
def remove_member(org: str, user: str) -> Response:
    actor = page_user()
    organization = services.get_organization_for(actor, org, "members")
    try:
        person = get_user_by_reference(user)
        services.remove_member(actor, organization, person)
        flash(f"Removed {person.username} from {organization.name}.", "success")
    except DomainError as error:
        flash(error.message, "error")
    return redirect(url_for("organizations.show", org=organization.name))
