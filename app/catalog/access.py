"""Who may use or administer which template: the one rule, as a check for one template and as a SQL filter for
lists, search and paging.

- Owners and template admins (site roles) administer every template.
- Anyone else may ``use`` a template (see it, create workspaces from it, start them) when its access list names
  them, or a group they are in (Everyone included), with ``use`` or ``admin``, in an organisation they belong to;
  ``admin`` there lets them manage that template alone (push versions, settings, its access list, its
  workspaces' builds).
- A template someone may not use does not exist for them (404), except when they start a workspace they already
  have from it: that is refused with who can grant access (``require_use_for_build``).

Every check is one statement, whatever the number of groups or entries (``group_ids_of`` is a subquery).
"""

from __future__ import annotations

from typing import Literal

from sqlalchemy import ColumnElement, CompoundSelect, Select, and_, literal, or_, select, true

from app.catalog.models import Template, TemplateAcl
from app.core.errors import Forbidden, NotFound
from app.core.extensions import db
from app.groups.models import ACL_ADMIN, ACL_ROLES, ACL_USE, AclRole, Group
from app.groups.services import group_ids_of
from app.organizations.services import organization_ids_of
from app.users.models import User

TemplateNeed = Literal["use", "admin"]
# Admins named in a refusal: enough to know whom to ask, not a directory.
NAMED_ADMINS = 5


def _granting(need: TemplateNeed) -> tuple[AclRole, ...]:
    return ACL_ROLES if need == ACL_USE else (ACL_ADMIN,)


def _entries_for(user: User, need: TemplateNeed) -> ColumnElement[bool]:
    """Access-list rows that give ``user`` at least ``need``."""
    subject = or_(TemplateAcl.user_id == user.id, TemplateAcl.group_id.in_(group_ids_of(user.id)))
    return and_(subject, TemplateAcl.role.in_(_granting(need)))


def template_filter(user: User, need: TemplateNeed = "use") -> ColumnElement[bool]:
    """A WHERE clause on ``Template`` keeping the templates ``user`` may ``need``: lists, search, paging, counts."""
    if user.is_template_admin or user.is_auditor:
        return true()
    return and_(
        Template.organization_id.in_(organization_ids_of(user.id)),
        Template.id.in_(granted_template_ids(user, need)),
    )


def granted_template_ids(user: User, need: TemplateNeed = "use") -> CompoundSelect[str]:
    """Ids of the templates whose access list gives ``user`` at least ``need``: the entries naming them, then those
    naming their groups. Two arms rather than one OR, so that each reads its own index (by person, by group) at any
    number of entries."""
    roles = TemplateAcl.role.in_(_granting(need))
    direct = select(TemplateAcl.template_id).where(TemplateAcl.user_id == user.id, roles)
    through_groups = select(TemplateAcl.template_id).where(TemplateAcl.group_id.in_(group_ids_of(user.id)), roles)
    return direct.union_all(through_groups)


def template_role(user: User, template: Template) -> AclRole | None:
    """What ``user`` may do with ``template``: ``admin``, ``use`` or nothing (None). Auditors read as admins do;
    their writes are refused before any view runs (app/auth/access.py refuse_read_only)."""
    if user.is_template_admin or user.is_auditor:
        return ACL_ADMIN
    roles = set(
        db.session.scalars(
            select(TemplateAcl.role).where(
                TemplateAcl.template_id == template.id,
                _entries_for(user, "use"),
                # A person no longer in the template's organisation is granted nothing by it.
                literal(template.organization_id).in_(organization_ids_of(user.id)),
            )
        )
    )
    if ACL_ADMIN in roles:
        return ACL_ADMIN
    return ACL_USE if ACL_USE in roles else None


def may(user: User, template: Template, need: TemplateNeed) -> bool:
    role = template_role(user, template)
    return role is not None and role in _granting(need)


def require(user: User, template: Template, need: TemplateNeed) -> Template:
    """``template`` if ``user`` may ``need`` it: 404 when they may not even use it (it does not exist for them), 403
    naming who can grant more when they may use it but not administer it."""
    role = template_role(user, template)
    if role is None:
        raise NotFound("No such template.")
    if need == ACL_ADMIN and role != ACL_ADMIN:
        raise Forbidden(f"You may use template {template.name} but not manage it: {who_can_grant(template)}")
    return template


def require_use_for_build(owner: User, template: Template, actor: User) -> None:
    """A workspace started by ``actor`` (its owner, or someone it is shared with) whose owner may no longer use its
    template: refused, saying why and whom to ask (they know the template exists: the workspace is built from it).
    The owner's permission counts, so that a share never lends its holder a template its owner lost."""
    if template_role(owner, template) is None:
        who = "You no longer have" if owner.id == actor.id else f"{owner.username} no longer has"
        raise Forbidden(
            f"{who} permission to use template {template.name}, so this workspace cannot be started: "
            + who_can_grant(template),
            detail="Stopping and deleting it remain possible.",
        )


def who_can_grant(template: Template) -> str:
    """ "ask …" naming the people and groups who administer the template, or owners and template admins."""
    admins = db.session.scalars(
        select(User.username)
        .join(TemplateAcl, TemplateAcl.user_id == User.id)
        .where(TemplateAcl.template_id == template.id, TemplateAcl.role == ACL_ADMIN)
        .order_by(User.username)
        .limit(NAMED_ADMINS)
    ).all()
    groups = db.session.scalars(
        select(Group.name)
        .join(TemplateAcl, TemplateAcl.group_id == Group.id)
        .where(TemplateAcl.template_id == template.id, TemplateAcl.role == ACL_ADMIN)
        .order_by(Group.name)
        .limit(NAMED_ADMINS)
    ).all()
    names = [*admins, *(f"a member of group {name}" for name in groups)]
    if names:
        return f"ask one of its admins ({', '.join(names)}), an owner or a template admin for access."
    return "ask an owner or a template admin for access."


def administers_any(user: User) -> bool:
    """Owners, template admins, and whoever administers at least one template: the people who push versions."""
    if user.is_template_admin:
        return True
    query = select(TemplateAcl.id).where(_entries_for(user, "admin")).limit(1)
    return db.session.scalar(query) is not None


def require_author(user: User) -> None:
    if not administers_any(user):
        raise Forbidden("Only owners, template admins and a template's own admins push templates.")


def usable_templates(user: User, query: Select[Template]) -> Select[Template]:
    """``query`` (of templates) narrowed to those ``user`` may use."""
    return query.where(template_filter(user, "use"))
