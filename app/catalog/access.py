"""Who may use or administer which template: the one rule, as a check for one template and as a SQL filter for
lists, search and paging.

- Owners and template admins (site roles) administer every template.
- Anyone else may ``use`` a template (see it, create workspaces from it, start them) when its access list names
  them, or a group they are in (Everyone included), with ``use`` or ``admin``, in an organisation they belong to;
  ``admin`` there lets them manage that template alone (push versions, settings, its access list, its
  workspaces' builds).
- In an organisation, its template admins and organisation admins administer its templates as template admins do
  everywhere (and create templates there); its auditors read them as auditors do, changing nothing: a read is a
  request that changes nothing (``reading``, from the request's method unless the caller says).
- A template someone may not use does not exist for them (404), except when they start a workspace they already
  have from it: that is refused with who can grant access (``require_use_for_build``).

Every check is one statement, whatever the number of groups or entries (``group_ids_of`` is a subquery).
"""

from __future__ import annotations

from typing import Literal

from flask import has_request_context, request
from sqlalchemy import ColumnElement, CompoundSelect, Select, and_, literal, or_, select, true

from app.catalog.models import Template, TemplateAcl
from app.core.errors import Forbidden, NotFound
from app.core.extensions import db
from app.groups.models import ACL_ADMIN, ACL_ROLES, ACL_USE, AclRole, Group
from app.groups.services import group_ids_of
from app.organizations.models import ORG_ROLE_AUDITOR, ORG_TEMPLATE_MANAGERS, Organization, OrganizationMember
from app.organizations.services import organization_ids_of, organizations_where
from app.users.models import User

TemplateNeed = Literal["use", "admin"]
# Requests that change nothing (as app/auth/access.py's READ_METHODS, which this layer may not import).
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
# Admins named in a refusal: enough to know whom to ask, not a directory.
NAMED_ADMINS = 5


def _granting(need: TemplateNeed) -> tuple[AclRole, ...]:
    return ACL_ROLES if need == ACL_USE else (ACL_ADMIN,)


def _entries_for(user: User, need: TemplateNeed) -> ColumnElement[bool]:
    """Access-list rows that give ``user`` at least ``need``."""
    subject = or_(TemplateAcl.user_id == user.id, TemplateAcl.group_id.in_(group_ids_of(user.id)))
    return and_(subject, TemplateAcl.role.in_(_granting(need)))


def _reading(reading: bool | None) -> bool:
    if reading is not None:
        return reading
    return has_request_context() and request.method in READ_METHODS


def organization_roles(user: User, organization_id: str) -> list[str]:
    """``user``'s roles in the organisation (none when not a member); the session's identity map keeps the row."""
    membership = db.session.get(OrganizationMember, (organization_id, user.id))
    return list(membership.roles or ()) if membership is not None else []


def manages_templates_of(user: User, organization_id: str) -> bool:
    """Owners, and template admins and organisation admins of that organisation."""
    if user.is_owner:
        return True
    return any(role in ORG_TEMPLATE_MANAGERS for role in organization_roles(user, organization_id))


def audits(user: User, organization_id: str) -> bool:
    return ORG_ROLE_AUDITOR in organization_roles(user, organization_id)


def may_create_in(user: User, organization_id: str) -> bool:
    """Who makes new templates in an organisation: owners, site template admins who belong to it, and its own
    template admins and organisation admins."""
    if user.is_template_admin and db.session.get(OrganizationMember, (organization_id, user.id)) is not None:
        return True
    return manages_templates_of(user, organization_id)


def creatable_organization_ids(user: User) -> list[str]:
    """The organisations ``user`` may create templates in (:func:`may_create_in`), for the dashboard's form."""
    if user.is_owner:
        return list(db.session.scalars(select(Organization.id)))
    if user.is_template_admin:
        return list(db.session.scalars(organization_ids_of(user.id)))
    return organizations_where(user.id, ORG_TEMPLATE_MANAGERS)


def template_filter(user: User, need: TemplateNeed = "use", *, reading: bool | None = None) -> ColumnElement[bool]:
    """A WHERE clause on ``Template`` keeping the templates ``user`` may ``need``: lists, search, paging, counts."""
    if user.is_template_admin or user.is_auditor:
        return true()
    granted = and_(
        Template.organization_id.in_(organization_ids_of(user.id)),
        Template.id.in_(granted_template_ids(user, need)),
    )
    roles = ORG_TEMPLATE_MANAGERS + ((ORG_ROLE_AUDITOR,) if _reading(reading) else ())
    whole = organizations_where(user.id, roles)
    return or_(Template.organization_id.in_(whole), granted) if whole else granted


def granted_template_ids(user: User, need: TemplateNeed = "use") -> CompoundSelect[str]:
    """Ids of the templates whose access list gives ``user`` at least ``need``: the entries naming them, then those
    naming their groups. Two arms rather than one OR, so that each reads its own index (by person, by group) at any
    number of entries."""
    roles = TemplateAcl.role.in_(_granting(need))
    direct = select(TemplateAcl.template_id).where(TemplateAcl.user_id == user.id, roles)
    through_groups = select(TemplateAcl.template_id).where(TemplateAcl.group_id.in_(group_ids_of(user.id)), roles)
    return direct.union_all(through_groups)


def template_role(user: User, template: Template, *, reading: bool | None = None) -> AclRole | None:
    """What ``user`` may do with ``template``: ``admin``, ``use`` or nothing (None). Auditors read as admins do;
    site auditors' writes are refused before any view runs (app/auth/access.py refuse_read_only), an organisation's
    auditors read as admins only while ``reading``."""
    if user.is_template_admin or user.is_auditor or manages_templates_of(user, template.organization_id):
        return ACL_ADMIN
    if _reading(reading) and audits(user, template.organization_id):
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


def may(user: User, template: Template, need: TemplateNeed, *, reading: bool | None = None) -> bool:
    role = template_role(user, template, reading=reading)
    return role is not None and role in _granting(need)


def require(user: User, template: Template, need: TemplateNeed) -> Template:
    """``template`` if ``user`` may ``need`` it: 404 when they may not even use it (it does not exist for them), 403
    naming who can grant more when they may use it but not administer it."""
    role = template_role(user, template)
    if (role is None or (need == ACL_ADMIN and role != ACL_ADMIN)) and audits(user, template.organization_id):
        raise Forbidden("Auditors read; they change nothing.")
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


def administers_any(user: User, *, organizations_only: bool = False) -> bool:
    """Owners, template admins, organisations' template admins, and (unless ``organizations_only``: who may create
    templates) whoever administers at least one template: the people who push versions."""
    if user.is_template_admin or organizations_where(user.id, ORG_TEMPLATE_MANAGERS):
        return True
    if organizations_only:
        return False
    query = select(TemplateAcl.id).where(_entries_for(user, "admin")).limit(1)
    return db.session.scalar(query) is not None


def require_author(user: User) -> None:
    if not administers_any(user):
        raise Forbidden("Only owners, template admins and a template's own admins push templates.")


def usable_templates(user: User, query: Select[Template]) -> Select[Template]:
    """``query`` (of templates) narrowed to those ``user`` may use."""
    return query.where(template_filter(user, "use"))
