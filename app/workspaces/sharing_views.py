"""The Sharing card of a workspace's page: who it is shared with, and (for its owner) a form to add, change or
remove a person or a group. The same service as ``PATCH /api/v2/workspaces/{id}/acl``."""

from __future__ import annotations

from flask import flash, redirect, request, url_for
from sqlalchemy import select
from werkzeug.wrappers import Response

from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.core.errors import DomainError
from app.core.extensions import db
from app.groups.models import Group
from app.organizations.models import OrganizationMember
from app.users.models import STATUS_ACTIVE, User
from app.workspaces import services, sharing
from app.workspaces.models import Workspace

bp = page_blueprint("workspace_sharing", __name__)
# The picker offers this many names of each kind (typing narrows nothing server-side: the datalist filters).
PICKER_LIMIT = 200
KINDS = ("user", "group")


def picker_names(workspace: Workspace) -> tuple[list[str], list[str]]:
    """Usernames and group names of the workspace's organisation, for the card's picker."""
    organization_id = workspace.template.organization_id
    users = db.session.scalars(
        select(User.username)
        .join(OrganizationMember, OrganizationMember.user_id == User.id)
        .where(OrganizationMember.organization_id == organization_id, User.status == STATUS_ACTIVE)
        .where(User.id != workspace.owner_id)
        .order_by(User.username)
        .limit(PICKER_LIMIT)
    )
    groups = db.session.scalars(
        select(Group.name).where(Group.organization_id == organization_id).order_by(Group.name).limit(PICKER_LIMIT)
    )
    return list(users), list(groups)


@bp.post("/workspaces/<workspace_id>/sharing")
def update(workspace_id: str) -> Response:
    """One entry: ``kind`` (user or group), ``name``, ``role`` (use, admin, or empty to remove)."""
    workspace = services.get_workspace_for(page_user(), workspace_id, need="share")
    kind, name, role = (request.form.get(key, "").strip() for key in ("kind", "name", "role"))
    back = redirect(url_for("workspaces.show", workspace_id=workspace.id) + "#sharing-card")
    if kind not in KINDS or not name:
        flash("Choose a person or a group by name.", "error")
        return back
    entry = {name: role}
    try:
        sharing.update_sharing(workspace, entry if kind == "user" else {}, entry if kind == "group" else {})
    except DomainError as error:
        flash(error.message + "".join(f" {item['detail']}" for item in error.validations), "error")
        return back
    flash(f"No longer shared with {name}." if not role else f"Shared with {name} ({role}).", "success")
    return back
