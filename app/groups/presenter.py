"""Groups as the API shows them (Coder's ``codersdk.Group`` shape)."""

from __future__ import annotations

from collections.abc import Sequence

from app.core.columns import rfc3339
from app.groups.models import EVERYONE, Group
from app.organizations.models import Organization
from app.users.models import User
from protocol.codec import JsonObject


def reduced_user_json(user: User) -> JsonObject:
    """A person as a group lists them (Coder's ReducedUser): enough to show and pick, no roles."""
    return {
        "id": user.id,
        "username": user.username,
        "name": "",
        "email": user.email,
        "status": user.status,
        "login_type": user.login_type,
        "avatar_url": "",
        "created_at": rfc3339(user.created_at),
        "last_seen_at": rfc3339(user.last_seen_at),
    }


def group_json(
    group: Group, organization: Organization, *, member_count: int, members: Sequence[User] | None = None
) -> JsonObject:
    """``members`` is one page of them (``total_member_count`` says how many there are); None leaves the list
    empty, as the groups list does so that its size does not grow with the organisation."""
    return {
        "id": group.id,
        "name": group.name,
        "display_name": group.display_name or (EVERYONE if group.is_everyone else ""),
        "organization_id": group.organization_id,
        "organization_name": organization.name,
        "organization_display_name": organization.display_name or organization.name,
        "avatar_url": group.avatar_url,
        "quota_allowance": group.quota_allowance,
        "source": group.source,
        "members": [reduced_user_json(user) for user in members or ()],
        "total_member_count": member_count,
    }
