"""Who may see and manage groups. Owners and user-admins manage them; template admins see them all (they grant
templates to them), and so do an organisation's template admins, organisation admins and auditors (its groups);
anyone else sees the groups they are in, Everyone included."""

from __future__ import annotations

from app.core.errors import Forbidden, NotFound
from app.core.extensions import db
from app.groups.models import Group
from app.groups.services import is_in_group
from app.organizations.models import ORG_READERS, OrganizationMember
from app.users.models import User


def may_manage(user: User) -> bool:
    return user.is_user_admin


def require_manager(user: User) -> None:
    if not may_manage(user):
        raise Forbidden("Only owners and user admins manage groups.")


def sees_all(user: User) -> bool:
    return user.is_user_admin or user.is_template_admin


def sees_all_in(user: User, organization_id: str) -> bool:
    """Every group of that organisation: who sees all groups, and its template admins, admins and auditors."""
    if sees_all(user):
        return True
    membership = db.session.get(OrganizationMember, (organization_id, user.id))
    return membership is not None and any(role in ORG_READERS for role in membership.roles or ())


def listed_for(user: User, organization_id: str) -> str | None:
    """The member a list of that organisation's groups is narrowed to (None: every group)."""
    return None if sees_all_in(user, organization_id) else user.id


def get_group_for(user: User, group: Group) -> Group:
    """404 for a group the person may not see: it may as well not exist."""
    if not sees_all_in(user, group.organization_id) and not is_in_group(user, group):
        raise NotFound("No such group.")
    return group
