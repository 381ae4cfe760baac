"""Groups and roles from the identity provider (Coder's IdP sync), applied at every OpenID sign-in.

Settings live on the organisation (``group_sync``, ``role_sync``; {} = off):
- groups: the claim ``field`` holds the person's IdP groups; those matching ``regex_filter`` (all, when unset)
  map through ``mapping`` (IdP group → Slipway group ids) or, unmapped, to the organisation's group of the same
  name, created (source ``oidc``) when ``auto_create_missing_groups`` is on. The person is then in exactly those
  of the *synced* groups: every ``oidc`` group and every mapping target. Groups made by hand and not mapped are
  never touched, so that sync and people do not fight over them.
- roles: the claim ``field`` holds the person's IdP roles; ``mapping`` (IdP role → site roles among owner,
  user-admin, template-admin) decides which of those roles they hold; roles the mapping never grants stay.

Membership of an ``oidc`` group is the provider's alone: :func:`refuse_manual_change` is the check every manual
change (the groups API and page) calls.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from dataclasses import field as default
from typing import Any

from sqlalchemy import delete, insert, or_, select

from app.core.errors import Conflict, InvalidInput
from app.core.extensions import db
from app.groups.models import SOURCE_OIDC, Group, GroupMember
from app.organizations.models import Organization
from app.users.models import ASSIGNABLE_ROLES, User
from protocol.codec import JSON, JsonObject

log = logging.getLogger(__name__)

GROUP_NAME = re.compile(r"^[a-zA-Z0-9_]+(?:[-.][a-zA-Z0-9_]+)*$")
MAX_NAME = 64
MAX_FIELD = 128


def refuse_manual_change(group: Group) -> None:
    """Membership of a group the identity provider fills is changed at the provider, never by hand: it would be
    undone at the person's next sign-in."""
    if group.source == SOURCE_OIDC:
        raise Conflict(
            f"Group {group.name} is synced from the identity provider: its members change there, and here at "
            "each person's next sign-in. Change the person's groups at the provider, or the IdP sync settings."
        )


@dataclass(frozen=True)
class GroupSync:
    field: str = ""
    mapping: dict[str, list[str]] = default(default_factory=dict)
    regex_filter: str | None = None
    auto_create_missing_groups: bool = False

    def to_json(self) -> JsonObject:
        return {
            "field": self.field,
            "mapping": {key: list(value) for key, value in self.mapping.items()},
            "regex_filter": self.regex_filter,
            "auto_create_missing_groups": self.auto_create_missing_groups,
        }


@dataclass(frozen=True)
class RoleSync:
    field: str = ""
    mapping: dict[str, list[str]] = default(default_factory=dict)

    def to_json(self) -> JsonObject:
        return {"field": self.field, "mapping": {key: list(value) for key, value in self.mapping.items()}}


def group_sync_of(organization: Organization) -> GroupSync:
    stored = organization.group_sync or {}
    return GroupSync(
        field=str(stored.get("field") or ""),
        mapping={str(key): [str(item) for item in value] for key, value in (stored.get("mapping") or {}).items()},
        regex_filter=stored.get("regex_filter") or None,
        auto_create_missing_groups=bool(stored.get("auto_create_missing_groups")),
    )


def role_sync_of(organization: Organization) -> RoleSync:
    stored = organization.role_sync or {}
    return RoleSync(
        field=str(stored.get("field") or ""),
        mapping={str(key): [str(item) for item in value] for key, value in (stored.get("mapping") or {}).items()},
    )


def update_group_sync(organization: Organization, body: Mapping[str, JSON]) -> GroupSync:
    """Coder's PATCH (the whole settings object); every problem named at once."""
    problems: list[dict[str, str]] = []
    claim = _claim_field(body, problems)
    mapping = _mapping(body, problems)
    regex = body.get("regex_filter")
    if regex is not None and not isinstance(regex, str):
        problems.append({"field": "regex_filter", "detail": "A regular expression, or null."})
        regex = None
    if regex:
        try:
            re.compile(regex)
        except re.error as exc:
            problems.append({"field": "regex_filter", "detail": f"Not a regular expression: {exc}."})
    auto_create = body.get("auto_create_missing_groups", False)
    if not isinstance(auto_create, bool):
        problems.append({"field": "auto_create_missing_groups", "detail": "true or false."})
        auto_create = False
    wanted = {group_id for ids in mapping.values() for group_id in ids}
    known = set(
        db.session.scalars(select(Group.id).where(Group.organization_id == organization.id, Group.id.in_(wanted)))
    )
    problems += [
        {"field": f"mapping.{idp}", "detail": f"No group {group_id} in the organisation."}
        for idp, ids in mapping.items()
        for group_id in ids
        if group_id not in known
    ]
    if problems:
        raise InvalidInput("Some group sync settings are invalid.", validations=problems)
    settings = GroupSync(claim, mapping, regex or None, auto_create)
    organization.group_sync = settings.to_json()
    db.session.commit()
    return settings


def update_role_sync(organization: Organization, body: Mapping[str, JSON]) -> RoleSync:
    problems: list[dict[str, str]] = []
    claim = _claim_field(body, problems)
    mapping = _mapping(body, problems)
    problems += [
        {"field": f"mapping.{idp}", "detail": f"{role!r} is not one of {', '.join(ASSIGNABLE_ROLES)}."}
        for idp, roles in mapping.items()
        for role in roles
        if role not in ASSIGNABLE_ROLES
    ]
    if problems:
        raise InvalidInput("Some role sync settings are invalid.", validations=problems)
    settings = RoleSync(claim, mapping)
    organization.role_sync = settings.to_json()
    db.session.commit()
    return settings


def _claim_field(body: Mapping[str, JSON], problems: list[dict[str, str]]) -> str:
    value = body.get("field", "")
    if not isinstance(value, str) or len(value) > MAX_FIELD:
        problems.append({"field": "field", "detail": f"The claim's name: text up to {MAX_FIELD} characters."})
        return ""
    return value.strip()


def _mapping(body: Mapping[str, JSON], problems: list[dict[str, str]]) -> dict[str, list[str]]:
    value = body.get("mapping") or {}
    if not isinstance(value, dict) or not all(
        isinstance(items, list) and all(isinstance(item, str) for item in items) for items in value.values()
    ):
        problems.append({"field": "mapping", "detail": "Map each IdP value to a list of strings."})
        return {}
    return {str(key): [str(item) for item in items] for key, items in value.items() if isinstance(items, list)}


def claim_values(claims: Mapping[str, Any], name: str) -> set[str]:
    """A claim as a set of strings: a list of them, or one string; anything else (or no claim) is none."""
    raw = claims.get(name)
    if isinstance(raw, str):
        return {raw}
    if isinstance(raw, list):
        return {item for item in raw if isinstance(item, str)}
    return set()


@dataclass(frozen=True)
class GroupChange:
    joined: list[str]
    left: list[str]


def sync_groups(organization: Organization, user: User, claims: Mapping[str, Any]) -> GroupChange | None:
    """Put ``user`` in exactly the synced groups their claim names (None: group sync is off). In the caller's
    transaction: it commits, then reports what was left (access that may end)."""
    settings = group_sync_of(organization)
    if not settings.field:
        return None
    idp_groups = claim_values(claims, settings.field)
    if settings.regex_filter:
        pattern = re.compile(settings.regex_filter)
        idp_groups = {name for name in idp_groups if pattern.search(name)}
    wanted = {group_id for name in idp_groups for group_id in settings.mapping.get(name, [])}
    unmapped = sorted(name for name in idp_groups if name not in settings.mapping)
    wanted |= _groups_by_name(organization, unmapped, create=settings.auto_create_missing_groups)
    synced = set(
        db.session.scalars(
            select(Group.id).where(
                Group.organization_id == organization.id,
                Group.id != organization.id,  # Everyone holds everyone: never synced
                or_(Group.source == SOURCE_OIDC, Group.id.in_(_targets(settings.mapping))),
            )
        )
    )
    wanted.discard(organization.id)
    current = set(
        db.session.scalars(
            select(GroupMember.group_id).where(
                GroupMember.user_id == user.id, GroupMember.group_id.in_(synced | wanted)
            )
        )
    )
    joined, left = sorted(wanted - current), sorted((current & synced) - wanted)
    if left:
        db.session.execute(delete(GroupMember).where(GroupMember.user_id == user.id, GroupMember.group_id.in_(left)))
    if joined:
        db.session.execute(insert(GroupMember), [{"group_id": group_id, "user_id": user.id} for group_id in joined])
    if joined or left:
        log.info("IdP group sync of %s: joined %s, left %s", user.username, joined, left)
    return GroupChange(joined, left)


def _targets(mapping: Mapping[str, Iterable[str]]) -> list[str]:
    return sorted({group_id for ids in mapping.values() for group_id in ids})


def _groups_by_name(organization: Organization, names: list[str], *, create: bool) -> set[str]:
    """The organisation's groups named as these IdP groups; the missing ones created (source oidc) when asked and
    their names are valid group names."""
    if not names:
        return set()
    rows = db.session.execute(
        select(Group.name, Group.id).where(Group.organization_id == organization.id, Group.name.in_(names))
    )
    found = {name: group_id for name, group_id in rows}
    if create:
        for name in names:
            if name in found or not (len(name) <= MAX_NAME and GROUP_NAME.match(name)):
                continue
            group = Group(organization_id=organization.id, name=name, source=SOURCE_OIDC)
            db.session.add(group)
            db.session.flush()
            log.info("IdP group sync created group %s", name)
            found[name] = group.id
    return set(found.values())


def synced_roles(organization: Organization, claims: Mapping[str, Any], current: Iterable[str]) -> list[str] | None:
    """The site roles ``current`` become under the organisation's role sync (None: it is off). Roles the mapping
    grants follow the claim; roles it never grants (given by hand) stay."""
    settings = role_sync_of(organization)
    if not settings.field or not settings.mapping:
        return None
    values = claim_values(claims, settings.field)
    mapped = {role for roles in settings.mapping.values() for role in roles}
    granted = {role for value in values for role in settings.mapping.get(value, [])}
    roles = (set(current) - mapped) | granted
    return [role for role in ASSIGNABLE_ROLES if role in roles]
