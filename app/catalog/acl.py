"""A template's access list: who may use or administer it (Coder's ``/templates/{id}/acl``). The rule that reads it
is app/catalog/access.py; this module reads and changes the entries."""

from __future__ import annotations

from collections.abc import Mapping

from sqlalchemy import delete, func, or_, select

from app.catalog.models import Template, TemplateAcl
from app.core.errors import InvalidInput
from app.core.extensions import db
from app.groups.models import ACL_ROLES, Group
from app.groups.services import AccessList, read_access_list
from app.organizations.models import OrganizationMember
from app.users.models import STATUS_ACTIVE, User

# "" removes the entry, as in Coder's PATCH.
REMOVE = ""
AVAILABLE_LIMIT = 50


def template_acl(template: Template) -> AccessList:
    """The template's entries: people by username, groups by name (Everyone first). Two queries."""
    return read_access_list(
        TemplateAcl.user_id, TemplateAcl.group_id, TemplateAcl.role, TemplateAcl.template_id == template.id
    )


def update_template_acl(template: Template, user_perms: Mapping[str, str], group_perms: Mapping[str, str]) -> None:
    """Set (``use`` / ``admin``) or remove (``""``) entries, all or nothing. People must be members of the
    template's organisation and groups must be its groups; every problem is named at once."""
    problems: list[dict[str, str]] = []
    for kind, perms in (("user_perms", user_perms), ("group_perms", group_perms)):
        for subject, role in perms.items():
            if role != REMOVE and role not in ACL_ROLES:
                problems.append({"field": f"{kind}.{subject}", "detail": 'Use "use", "admin", or "" to remove.'})
    wanted_users = [user_id for user_id, role in user_perms.items() if role != REMOVE]
    members = set(
        db.session.scalars(
            select(OrganizationMember.user_id).where(
                OrganizationMember.organization_id == template.organization_id,
                OrganizationMember.user_id.in_(wanted_users),
            )
        )
    )
    problems += [
        {"field": f"user_perms.{user_id}", "detail": "No such person in the template's organisation."}
        for user_id in wanted_users
        if user_id not in members
    ]
    wanted_groups = [group_id for group_id, role in group_perms.items() if role != REMOVE]
    groups = set(
        db.session.scalars(
            select(Group.id).where(Group.organization_id == template.organization_id, Group.id.in_(wanted_groups))
        )
    )
    problems += [
        {"field": f"group_perms.{group_id}", "detail": "No such group in the template's organisation."}
        for group_id in wanted_groups
        if group_id not in groups
    ]
    if problems:
        raise InvalidInput("Some entries of the access list are invalid.", validations=problems)
    for column, perms in ((TemplateAcl.user_id, user_perms), (TemplateAcl.group_id, group_perms)):
        if perms:
            # Replaced rather than updated: one statement each way, whatever the number of entries.
            db.session.execute(
                delete(TemplateAcl).where(TemplateAcl.template_id == template.id, column.in_(list(perms)))
            )
    entries = [TemplateAcl(template_id=template.id, user_id=u, role=r) for u, r in user_perms.items() if r != REMOVE]
    entries += [TemplateAcl(template_id=template.id, group_id=g, role=r) for g, r in group_perms.items() if r != REMOVE]
    db.session.add_all(entries)
    db.session.commit()


def available(template: Template, text: str = "", limit: int = AVAILABLE_LIMIT) -> tuple[list[User], list[Group]]:
    """Who could be added (Coder's ``/acl/available``): active members of the template's organisation and its
    groups, whose name (or email) contains ``text``, at most ``limit`` of each."""
    part = text.strip().lower()
    users = (
        select(User)
        .join(OrganizationMember, OrganizationMember.user_id == User.id)
        .where(OrganizationMember.organization_id == template.organization_id, User.status == STATUS_ACTIVE)
        .order_by(User.username)
        .limit(limit)
    )
    groups = (
        select(Group)
        .where(Group.organization_id == template.organization_id)
        .order_by(Group.id != Group.organization_id, func.lower(Group.name))
        .limit(limit)
    )
    if part:
        users = users.where(
            or_(
                func.lower(User.username).contains(part, autoescape=True),
                func.lower(User.email).contains(part, autoescape=True),
            )
        )
        groups = groups.where(
            or_(
                func.lower(Group.name).contains(part, autoescape=True),
                func.lower(Group.display_name).contains(part, autoescape=True),
            )
        )
    return list(db.session.scalars(users)), list(db.session.scalars(groups))
