"""Shared workspaces (Coder's workspace ACL): a workspace's owner lets people or groups ``use`` it (see it, connect
to it in every way, start and stop it) or ``admin`` it (also its parameters, schedule, deletion).

This module answers "what does this person's share give them" (:func:`share_role`, and in SQL
:func:`shared_with`); the rule that combines it with ownership and site roles is ``can_read`` / ``can_use`` /
``can_act`` in app/workspaces/services.py, the one place every page, API call and connection asks.
"""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import ColumnElement, delete, func, or_, select

from app.core.errors import InvalidInput
from app.core.extensions import db
from app.events.access import access_lost
from app.groups.models import ACL_ADMIN, ACL_ROLES, ACL_USE, AclRole, Group
from app.groups.services import AccessList, group_ids_of, read_access_list
from app.organizations.models import OrganizationMember
from app.users.models import User
from app.workspaces.models import Workspace, WorkspaceAcl

# "" removes the entry, as in Coder's PATCH (codersdk.WorkspaceRoleDeleted).
REMOVE = ""


def _entries_for(user_id: str) -> ColumnElement[bool]:
    return or_(WorkspaceAcl.user_id == user_id, WorkspaceAcl.group_id.in_(group_ids_of(user_id)))


def share_role(user: User, workspace: Workspace) -> AclRole | None:
    """What the workspace's sharing list gives ``user``, directly or through a group: the stronger of its entries
    (``admin`` over ``use``), or None. One statement, however many groups."""
    roles = set(
        db.session.scalars(
            select(WorkspaceAcl.role).where(WorkspaceAcl.workspace_id == workspace.id, _entries_for(user.id))
        )
    )
    if ACL_ADMIN in roles:
        return ACL_ADMIN
    return ACL_USE if roles else None


def shared_with(user: User) -> ColumnElement[bool]:
    """SQL: the workspace is shared with ``user`` (any role), for lists (one subquery, whatever the groups)."""
    return Workspace.id.in_(select(WorkspaceAcl.workspace_id).where(_entries_for(user.id)))


def _user_ids(organization_id: str, keys: list[str]) -> dict[str, str]:
    """Each key (a user id or a username) that names a member of the organisation, to their id."""
    if not keys:
        return {}
    lowered = [key.lower() for key in keys]
    rows = db.session.execute(
        select(User.id, User.username)
        .join(OrganizationMember, OrganizationMember.user_id == User.id)
        .where(
            OrganizationMember.organization_id == organization_id,
            or_(User.id.in_(keys), func.lower(User.username).in_(lowered)),
        )
    ).all()
    by_id = {user_id: user_id for user_id, _ in rows}
    by_name = {username.lower(): user_id for user_id, username in rows}
    return {key: by_id.get(key) or by_name[key.lower()] for key in keys if key in by_id or key.lower() in by_name}


def _group_ids(organization_id: str, keys: list[str]) -> dict[str, str]:
    """Each key (a group id or name) that names a group of the organisation, to its id."""
    if not keys:
        return {}
    rows = db.session.execute(
        select(Group.id, Group.name).where(
            Group.organization_id == organization_id, or_(Group.id.in_(keys), Group.name.in_(keys))
        )
    ).all()
    found = {group_id: group_id for group_id, _ in rows} | {name: group_id for group_id, name in rows}
    return {key: found[key] for key in keys if key in found}


def sharing_list(workspace: Workspace) -> AccessList:
    """The workspace's entries: people by username, groups by name (Everyone first). Two queries."""
    return read_access_list(
        WorkspaceAcl.user_id, WorkspaceAcl.group_id, WorkspaceAcl.role, WorkspaceAcl.workspace_id == workspace.id
    )


def update_sharing(workspace: Workspace, user_roles: Mapping[str, str], group_roles: Mapping[str, str]) -> None:
    """Set (``use`` / ``admin``) or remove (``""``) entries, all or nothing; every problem is named at once. People
    must be members of the workspace's organisation (its template's) and groups its groups; the owner needs no
    entry. Connections that a removal (or a downgrade) no longer allows are closed once it is committed."""
    organization_id = workspace.template.organization_id
    problems: list[dict[str, str]] = []
    for kind, roles in (("user_roles", user_roles), ("group_roles", group_roles)):
        for subject, role in roles.items():
            if role != REMOVE and role not in ACL_ROLES:
                problems.append({"field": f"{kind}.{subject}", "detail": 'Use "use", "admin", or "" to remove.'})
    # Keys are ids, as in Coder's API; a username or group name works too (the CLI and the page send names).
    user_ids = _user_ids(organization_id, list(user_roles))
    group_ids = _group_ids(organization_id, list(group_roles))
    for key, role in user_roles.items():
        if key not in user_ids:
            if role != REMOVE:
                problems.append({"field": f"user_roles.{key}", "detail": "No such person in the organisation."})
        elif user_ids[key] == workspace.owner_id and role != REMOVE:
            problems.append({"field": f"user_roles.{key}", "detail": "The workspace's owner needs no share."})
    problems += [
        {"field": f"group_roles.{key}", "detail": "No such group in the organisation."}
        for key, role in group_roles.items()
        if key not in group_ids and role != REMOVE
    ]
    # A removal by id works even for someone who has since left the organisation.
    user_roles = {user_ids.get(key, key): role for key, role in user_roles.items()}
    group_roles = {group_ids.get(key, key): role for key, role in group_roles.items()}
    if problems:
        raise InvalidInput("Some entries of the sharing list are invalid.", validations=problems)
    for column, roles in ((WorkspaceAcl.user_id, user_roles), (WorkspaceAcl.group_id, group_roles)):
        if roles:
            # Replaced rather than updated: one statement each way, whatever the number of entries.
            db.session.execute(
                delete(WorkspaceAcl).where(WorkspaceAcl.workspace_id == workspace.id, column.in_(list(roles)))
            )
    entries = [
        WorkspaceAcl(workspace_id=workspace.id, user_id=user_id, role=role)
        for user_id, role in user_roles.items()
        if role != REMOVE
    ]
    entries += [
        WorkspaceAcl(workspace_id=workspace.id, group_id=group_id, role=role)
        for group_id, role in group_roles.items()
        if role != REMOVE
    ]
    db.session.add_all(entries)
    db.session.commit()
    # Any change may take something away (a removal, admin → use): the watchers re-check every open connection
    # of this workspace against the rule, and close what it no longer allows.
    access_lost(workspace_id=workspace.id)
