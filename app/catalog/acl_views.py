"""The Permissions tab of a template's settings: who may use or administer it, with a picker of people and groups.
Its admins, template admins and owners change it; the same service as ``PATCH /templates/{id}/acl``."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.catalog import access, acl, services
from app.catalog.models import Template
from app.core.errors import DomainError, InvalidInput
from app.groups.services import member_counts

bp = page_blueprint("template_acl", __name__)
# People offered by the picker's list; anyone else is found by typing their exact username.
PICKER_SIZE = 200


@bp.app_template_global("administers_template")
def administers_template(template: Template) -> bool:
    """For pages: show a template's admin actions (settings, permissions, source) only to those who may use them."""
    return access.may(page_user(), template, "admin")


@bp.get("/templates/<name>/permissions")
def show(name: str) -> str:
    return _page(services.get_template_by_name_for(page_user(), name, "admin"))


def _page(template: Template, error: str = "") -> str:
    entries = acl.template_acl(template)
    people, groups = acl.available(template, limit=PICKER_SIZE)
    return render_template(
        "catalog/permissions.html",
        template=template,
        entries=entries,
        counts=member_counts([group for group, _ in entries.groups]),
        people=people,
        groups=groups,
        error=error,
    )


@bp.post("/templates/<name>/permissions")
def grant(name: str) -> Response | tuple[str, int]:
    """The picker: a person (by username) or a group, with use or admin."""
    template = services.get_template_by_name_for(page_user(), name, "admin")
    role = request.form.get("role", "")
    username, group_id = request.form.get("username", "").strip(), request.form.get("group_id", "").strip()
    try:
        if username:
            people, _ = acl.available(template, username, limit=PICKER_SIZE)
            match = [person for person in people if person.username.lower() == username.lower()]
            if not match:
                raise InvalidInput(f"No person named {username!r} in the template's organisation.")
            acl.update_template_acl(template, {match[0].id: role}, {})
        elif group_id:
            acl.update_template_acl(template, {}, {group_id: role})
        else:
            raise InvalidInput("Choose a person or a group.")
    except DomainError as error:
        return _page(template, error.validations[0]["detail"] if error.validations else error.message), error.status
    flash(f"Updated who may use {template.name}.", "success")
    return redirect(url_for("template_acl.show", name=template.name))


@bp.post("/templates/<name>/permissions/remove")
def remove(name: str) -> Response:
    template = services.get_template_by_name_for(page_user(), name, "admin")
    user_id, group_id = request.form.get("user_id", ""), request.form.get("group_id", "")
    try:
        acl.update_template_acl(template, {user_id: ""} if user_id else {}, {group_id: ""} if group_id else {})
        flash(f"Updated who may use {template.name}.", "success")
    except DomainError as error:
        flash(error.message, "error")
    return redirect(url_for("template_acl.show", name=template.name))
