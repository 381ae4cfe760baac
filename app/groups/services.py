"""Groups: who is in which, and changing that. Owners and user-admins manage groups; the built-in Everyone group
(id = its organisation's) holds every member of the organisation and cannot be renamed, deleted or edited.

``group_ids_of`` is the one definition of "the groups a person is in" that every access rule (template access
lists here, workspace sharing) builds on: a subquery, so a check costs one statement however many groups there are.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from sqlalchemy import ColumnElement, CompoundSelect, Select, delete, func, insert, or_, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import QueryableAttribute

from app.core.errors import Conflict, InvalidInput, NotFound
from app.core.extensions import db
from app.core.validation import FieldErrors
from app.events.access import access_lost
from app.groups.models import EVERYONE, SOURCE_USER, Group, GroupMember
from app.groups.sync import refuse_manual_change
from app.organizations.models import Organization, OrganizationMember
from app.organizations.services import organization_ids_of
from app.users.models import User
from app.users.search import named_like

# Coder's group names: letters, digits, hyphens and underscores (IdP group names such as "ml_team" map as they are).
GROUP_NAME = re.compile(r"^[a-zA-Z0-9_]+(?:[-.][a-zA-Z0-9_]+)*$")
MAX_NAME = 64
MAX_AVATAR_URL = 256


def group_ids_of(user_id: str) -> CompoundSelect[str]:
    """Every group ``user_id`` is in: the rows of group_members, and the Everyone group of each organisation they
    belong to (its id is the organisation's, so the membership table answers it)."""
    return select(GroupMember.group_id).where(GroupMember.user_id == user_id).union_all(organization_ids_of(user_id))


def get_group(group_id: str) -> Group:
    group = db.session.get(Group, group_id)
    if group is None:
        raise NotFound("No such group.")
    return group


def get_group_by_name(organization_id: str, name: str) -> Group:
    group = db.session.scalar(select(Group).where(Group.organization_id == organization_id, Group.name == name))
    if group is None:
        raise NotFound(f"No group named {name!r}.")
    return group


def is_in_group(user: User, group: Group) -> bool:
    if group.is_everyone:
        return db.session.get(OrganizationMember, (group.organization_id, user.id)) is not None
    return db.session.get(GroupMember, (group.id, user.id)) is not None


def groups_query(organization_id: str, text: str = "", *, member_id: str | None = None) -> Select[Group]:
    """An organisation's groups by name (Everyone first), narrowed to names or display names containing ``text``
    and, with ``member_id``, to the groups that person is in."""
    query = (
        select(Group)
        .where(Group.organization_id == organization_id)
        .order_by((Group.id != Group.organization_id), func.lower(Group.name), Group.id)
    )
    part = text.strip().lower()
    if part:
        in_name = func.lower(Group.name).contains(part, autoescape=True)
        query = query.where(or_(in_name, func.lower(Group.display_name).contains(part, autoescape=True)))
    if member_id is not None:
        query = query.where(Group.id.in_(group_ids_of(member_id)))
    return query


def members_query(group: Group, text: str = "") -> Select[User]:
    """The group's members by username (the organisation's members for Everyone), optionally those whose username or
    email contains ``text``."""
    if group.is_everyone:
        ids = select(OrganizationMember.user_id).where(OrganizationMember.organization_id == group.organization_id)
    else:
        ids = select(GroupMember.user_id).where(GroupMember.group_id == group.id)
    query = select(User).where(User.id.in_(ids)).order_by(User.username, User.id)
    return query.where(named_like(text.strip())) if text.strip() else query


def member_counts(groups: Sequence[Group]) -> dict[str, int]:
    """How many people each group holds, in two queries whatever the number of groups."""
    ids = [group.id for group in groups if not group.is_everyone]
    counts: dict[str, int] = {}
    if ids:
        rows = db.session.execute(
            select(GroupMember.group_id, func.count())
            .where(GroupMember.group_id.in_(ids))
            .group_by(GroupMember.group_id)
        )
        counts = {group_id: count for group_id, count in rows}
    orgs = {group.organization_id for group in groups if group.is_everyone}
    if orgs:
        rows = db.session.execute(
            select(OrganizationMember.organization_id, func.count())
            .where(OrganizationMember.organization_id.in_(orgs))
            .group_by(OrganizationMember.organization_id)
        )
        counts.update({org_id: count for org_id, count in rows})
    return {group.id: counts.get(group.id, 0) for group in groups}


def groups_of_users(user_ids: Iterable[str], organization_id: str) -> dict[str, list[Group]]:
    """The groups (Everyone left out: it holds them all) each of these people is in, in one query."""
    wanted = list(user_ids)
    found: dict[str, list[Group]] = {user_id: [] for user_id in wanted}
    if not wanted:
        return found
    rows = db.session.execute(
        select(GroupMember.user_id, Group)
        .join(Group, Group.id == GroupMember.group_id)
        .where(GroupMember.user_id.in_(wanted), Group.organization_id == organization_id)
        .order_by(func.lower(Group.name))
    )
    for user_id, group in rows:
        found[user_id].append(group)
    return found


@dataclass
class GroupChanges:
    """What a PATCH asks for: only the fields given change."""

    name: str | None = None
    display_name: str | None = None
    avatar_url: str | None = None
    quota_allowance: int | None = None
    add_users: list[str] = field(default_factory=list)
    remove_users: list[str] = field(default_factory=list)


def create_group(
    organization: Organization, name: str, display_name: str = "", avatar_url: str = "", quota_allowance: int = 0
) -> Group:
    changes = GroupChanges(name=name, display_name=display_name, avatar_url=avatar_url, quota_allowance=quota_allowance)
    _check(changes)
    name = name.strip()
    _refuse_taken(organization.id, name)
    group = Group(
        organization_id=organization.id,
        name=name,
        display_name=display_name.strip(),
        avatar_url=avatar_url.strip(),
        quota_allowance=quota_allowance,
        source=SOURCE_USER,
    )
    db.session.add(group)
    _commit(name)
    return group


def update_group(group: Group, changes: GroupChanges) -> Group:
    """Rename, restyle and change members, all or nothing. Everyone's name and members are the organisation's;
    a group the identity provider fills is rewritten at each sign-in, so its members are not edited by hand."""
    _check(changes)
    if group.is_everyone and (changes.name not in (None, group.name) or changes.add_users or changes.remove_users):
        raise InvalidInput(
            f"{EVERYONE} holds every member of the organisation: it cannot be renamed, and its members change only "
            "as people join or leave the organisation."
        )
    if changes.add_users or changes.remove_users:
        refuse_manual_change(group)
    if changes.name is not None and changes.name.strip() != group.name:
        _refuse_taken(group.organization_id, changes.name.strip())
        group.name = changes.name.strip()
    if changes.display_name is not None:
        group.display_name = changes.display_name.strip()
    if changes.avatar_url is not None:
        group.avatar_url = changes.avatar_url.strip()
    if changes.quota_allowance is not None:
        group.quota_allowance = changes.quota_allowance
    _add_members(group, changes.add_users)
    if changes.remove_users:
        db.session.execute(
            delete(GroupMember).where(GroupMember.group_id == group.id, GroupMember.user_id.in_(changes.remove_users))
        )
    _commit(group.name)
    # Whoever left may have held a workspace shared with the group open: those ways in close now.
    for user_id in changes.remove_users:
        access_lost(user_id=user_id)
    return group


def delete_group(group: Group) -> None:
    if group.is_everyone:
        raise InvalidInput(f"{EVERYONE} is built in: it cannot be deleted.")
    # Its members and its entries in access lists go with it (ON DELETE CASCADE).
    members = list(db.session.scalars(select(GroupMember.user_id).where(GroupMember.group_id == group.id)))
    db.session.delete(group)
    db.session.commit()
    for user_id in members:
        access_lost(user_id=user_id)


def set_members(group: Group, user_ids: Iterable[str]) -> None:
    """Make the group hold exactly these people (IdP sync); the caller commits."""
    wanted = set(user_ids)
    current = set(db.session.scalars(select(GroupMember.user_id).where(GroupMember.group_id == group.id)))
    if current - wanted:
        db.session.execute(
            delete(GroupMember).where(GroupMember.group_id == group.id, GroupMember.user_id.in_(current - wanted))
        )
    _add_members(group, sorted(wanted - current))


def _add_members(group: Group, user_ids: Sequence[str]) -> None:
    """Add people who are not yet in the group; each must be a member of the group's organisation."""
    wanted = list(dict.fromkeys(user_ids))
    if not wanted:
        return
    known = set(
        db.session.scalars(
            select(OrganizationMember.user_id).where(
                OrganizationMember.organization_id == group.organization_id, OrganizationMember.user_id.in_(wanted)
            )
        )
    )
    unknown = [user_id for user_id in wanted if user_id not in known]
    if unknown:
        raise InvalidInput(
            "Some people cannot be added.",
            validations=[
                {"field": "add_users", "detail": f"{user_id} is not a member of the group's organisation."}
                for user_id in unknown
            ],
        )
    present = set(
        db.session.scalars(
            select(GroupMember.user_id).where(GroupMember.group_id == group.id, GroupMember.user_id.in_(wanted))
        )
    )
    rows = [{"group_id": group.id, "user_id": user_id} for user_id in wanted if user_id not in present]
    if rows:
        db.session.execute(insert(GroupMember), rows)


def _check(changes: GroupChanges) -> None:
    errors = FieldErrors()
    if changes.name is not None:
        name = changes.name.strip()
        if not 1 <= len(name) <= MAX_NAME or not GROUP_NAME.match(name):
            errors.add(
                "name", f"Use 1-{MAX_NAME} letters, digits, underscores, and single hyphens or dots between them."
            )
        elif name.lower() == EVERYONE.lower():
            errors.add("name", f"{EVERYONE} is the built-in group of every member.")
    if changes.display_name is not None and len(changes.display_name.strip()) > 128:
        errors.add("display_name", "Use at most 128 characters.")
    if changes.avatar_url is not None:
        url = changes.avatar_url.strip()
        if len(url) > MAX_AVATAR_URL:
            errors.add("avatar_url", f"Use at most {MAX_AVATAR_URL} characters.")
        elif url and not url.startswith(("https://", "http://", "/")):
            errors.add("avatar_url", "Use an http(s) URL or a path on this server (/icon/…).")
    if changes.quota_allowance is not None and not 0 <= changes.quota_allowance <= 1_000_000_000:
        errors.add("quota_allowance", "Use a whole number from 0.")
    errors.raise_if_any()


def _refuse_taken(organization_id: str, name: str) -> None:
    taken = db.session.scalar(
        select(Group.id).where(Group.organization_id == organization_id, func.lower(Group.name) == name.lower())
    )
    if taken is not None:
        raise Conflict(
            f"A group named {name!r} already exists.", validations=[{"field": "name", "detail": "This name is taken."}]
        )


def _commit(name: str) -> None:
    try:
        db.session.commit()
    except IntegrityError as exc:  # a concurrent request took the name, or a member went away meanwhile
        db.session.rollback()
        raise Conflict(f"Group {name!r} changed meanwhile (its name was taken, or a member left): try again.") from exc


@dataclass(frozen=True)
class AccessList:
    """An access list's entries (a template's or a workspace's): people by username, groups by name, Everyone
    first; each with its role."""

    users: list[tuple[User, str]]
    groups: list[tuple[Group, str]]


def read_access_list(
    user_id: QueryableAttribute[str | None],
    group_id: QueryableAttribute[str | None],
    role: QueryableAttribute[str],
    of: ColumnElement[bool],
) -> AccessList:
    """The entries of one access list table (``user_id``, ``group_id`` and ``role`` are its columns) that ``of``
    keeps. Two queries."""
    users = db.session.execute(
        select(User, role).join_from(User, role.class_, user_id == User.id).where(of).order_by(User.username)
    ).all()
    groups = db.session.execute(
        select(Group, role)
        .join_from(Group, role.class_, group_id == Group.id)
        .where(of)
        .order_by(Group.id != Group.organization_id, func.lower(Group.name))
    ).all()
    return AccessList([(user, entry) for user, entry in users], [(group, entry) for group, entry in groups])
