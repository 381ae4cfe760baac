"""The Groups pages: the organisation's groups (search, create) and one group (its members paged and searched;
rename, avatar, add, remove, delete). Owners and user admins change them; the same rules as the API decide."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.core.errors import DomainError, InvalidInput
from app.core.pagination import page_of, requested_page
from app.groups import permissions, services
from app.organizations.models import DEFAULT_ORGANIZATION_ID
from app.organizations.services import get_organization
from app.users.services import get_user_by_reference

bp = page_blueprint("groups", __name__)


def _field_errors(error: DomainError) -> dict[str, str]:
    return {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}


@bp.route("/groups", methods=["GET", "POST"])
def index() -> str | tuple[str, int] | Response:
    user = page_user()
    organization = get_organization(DEFAULT_ORGANIZATION_ID)
    form = {key: request.form.get(key, "") for key in ("name", "display_name", "avatar_url")}
    errors: dict[str, str] = {}
    status = 200
    if request.method == "POST":
        permissions.require_manager(user)
        try:
            group = services.create_group(organization, form["name"], form["display_name"], form["avatar_url"])
        except DomainError as error:
            errors, status = _field_errors(error), error.status
        else:
            flash(f"Created group {group.name}.", "success")
            return redirect(url_for("groups.show", group_id=group.id))
    search = request.args.get("q", "").strip()
    query = services.groups_query(organization.id, search, member_id=permissions.listed_for(user, organization.id))
    page = page_of(query, requested_page(), endpoint="groups.index")
    return (
        render_template(
            "groups/index.html",
            page=page,
            counts=services.member_counts(page.rows),
            search=search,
            form=form,
            errors=errors,
            may_manage=permissions.may_manage(user),
        ),
        status,
    )


@bp.get("/groups/<group_id>")
def show(group_id: str) -> str:
    return _group_page(group_id)


def _group_page(group_id: str, errors: dict[str, str] | None = None) -> str:
    user = page_user()
    group = permissions.get_group_for(user, services.get_group(group_id))
    search = request.args.get("q", "").strip()
    members = page_of(services.members_query(group, search), requested_page(), endpoint="groups.show")
    return render_template(
        "groups/show.html",
        group=group,
        members=members,
        search=search,
        errors=errors or {},
        may_manage=permissions.may_manage(user),
    )


@bp.post("/groups/<group_id>/edit")
def edit(group_id: str) -> str | tuple[str, int] | Response:
    user = page_user()
    permissions.require_manager(user)
    group = permissions.get_group_for(user, services.get_group(group_id))
    changes = services.GroupChanges(
        name=request.form.get("name"),
        display_name=request.form.get("display_name"),
        avatar_url=request.form.get("avatar_url"),
    )
    try:
        services.update_group(group, changes)
    except DomainError as error:
        return _group_page(group_id, _field_errors(error)), error.status
    flash(f"Saved group {group.name}.", "success")
    return redirect(url_for("groups.show", group_id=group.id))


@bp.post("/groups/<group_id>/members")
def add_member(group_id: str) -> str | tuple[str, int] | Response:
    user = page_user()
    permissions.require_manager(user)
    group = permissions.get_group_for(user, services.get_group(group_id))
    username = request.form.get("username", "").strip()
    try:
        if not username:
            raise InvalidInput("Type a username.", validations=[{"field": "username", "detail": "Type a username."}])
        person = get_user_by_reference(username)
        services.update_group(group, services.GroupChanges(add_users=[person.id]))
    except DomainError as error:
        return _group_page(group_id, {"username": error.message}), error.status
    flash(f"Added {person.username} to {group.name}.", "success")
    return redirect(url_for("groups.show", group_id=group.id))


@bp.post("/groups/<group_id>/members/<user_id>/remove")
def remove_member(group_id: str, user_id: str) -> Response:
    user = page_user()
    permissions.require_manager(user)
    group = permissions.get_group_for(user, services.get_group(group_id))
    try:
        services.update_group(group, services.GroupChanges(remove_users=[user_id]))
        flash(f"Removed them from {group.name}.", "success")
    except DomainError as error:
        flash(error.message, "error")
    return redirect(url_for("groups.show", group_id=group.id))


@bp.post("/groups/<group_id>/delete")
def delete(group_id: str) -> Response:
    user = page_user()
    permissions.require_manager(user)
    group = permissions.get_group_for(user, services.get_group(group_id))
    try:
        services.delete_group(group)
    except DomainError as error:
        flash(error.message, "error")
        return redirect(url_for("groups.show", group_id=group.id))
    flash(f"Deleted group {group.name}.", "success")
    return redirect(url_for("groups.index"))
