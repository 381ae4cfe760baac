"""Who may see and manage groups. Owners and user-admins manage them; template admins see them all (they grant
templates to them); anyone else sees the groups they are in, Everyone included."""

from __future__ import annotations

from app.core.errors import Forbidden, NotFound
from app.groups.models import Group
from app.groups.services import is_in_group
from app.users.models import User


def may_manage(user: User) -> bool:
    return user.is_user_admin


def require_manager(user: User) -> None:
    if not may_manage(user):
        raise Forbidden("Only owners and user admins manage groups.")


def sees_all(user: User) -> bool:
    return user.is_user_admin or user.is_template_admin


def listed_for(user: User) -> str | None:
    """The member a group list is narrowed to (None: every group)."""
    return None if sees_all(user) else user.id


def get_group_for(user: User, group: Group) -> Group:
    """404 for a group the person may not see: it may as well not exist."""
    if not sees_all(user) and not is_in_group(user, group):
        raise NotFound("No such group.")
    return group
