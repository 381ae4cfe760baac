"""Managing organisations and who belongs to them: owners create, change and delete organisations; owners, user
admins and an organisation's own admins and user admins manage its members and their roles there.

It lives here, above the features, rather than in app/organizations (which sits below users, so that a new user
joins the default organisation in the same flush): a delete must know whether templates and workspaces remain,
creating one makes its Everyone group, and a members list shows people.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import Select, delete, func, select, update
from sqlalchemy.exc import IntegrityError

from app.catalog.models import Template
from app.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.core.extensions import db
from app.core.validation import USERNAME_PATTERN, FieldErrors, text_problem
from app.events.access import access_lost
from app.groups.models import EVERYONE, Group, GroupMember
from app.organizations.models import (
    DEFAULT_ORGANIZATION_ID,
    DEFAULT_ORGANIZATION_NAME,
    ORG_ROLE_ADMIN,
    ORG_ROLE_USER_ADMIN,
    ORG_ROLES,
    Organization,
    OrganizationMember,
)
from app.organizations.services import get_organization
from app.provisioning.models import ProvisionerJob
from app.users.models import SYSTEM_USER_IDS, User
from app.users.search import named_like
from app.workspaces.models import Workspace

MAX_NAME = 32
MAX_DISPLAY_NAME = 64
MAX_DESCRIPTION = 1024
MAX_ICON = 256
# How many names a refusal lists before "…".
NAMES_SHOWN = 5
# What a caller needs of an organisation: to see it, to manage its members, or to change or delete it (owners).
OrganizationNeed = Literal["read", "members", "owner"]
# The roles that manage an organisation's members.
MEMBER_MANAGERS = frozenset({ORG_ROLE_ADMIN, ORG_ROLE_USER_ADMIN})


@dataclass(frozen=True)
class OrganizationFields:
    """What a create or a PATCH gives: ``None`` leaves a field as it is."""

    name: str | None = None
    display_name: str | None = None
    description: str | None = None
    icon: str | None = None


def sees_every_organization(user: User) -> bool:
    """Owners and auditors read everything; user admins manage people in every organisation."""
    return user.reads_everything or user.is_user_admin


def organizations_for(user: User) -> list[Organization]:
    """The organisations ``user`` may see, the default one first, then by name."""
    query = select(Organization).order_by(Organization.is_default.desc(), func.lower(Organization.name))
    if not sees_every_organization(user):
        query = query.where(
            Organization.id.in_(select(OrganizationMember.organization_id).where(OrganizationMember.user_id == user.id))
        )
    return list(db.session.scalars(query))


def get_organization_for(user: User, reference: str, need: OrganizationNeed = "read") -> Organization:
    """The organisation (by id or name) if ``user`` may ``need`` it. Only owners change organisations (403 before
    any lookup); one a person may not see does not exist for them (404); a member who may not manage its members
    gets 403."""
    if need == "owner":
        require_owner(user)
    organization = get_organization(reference)
    membership = db.session.get(OrganizationMember, (organization.id, user.id))
    if membership is None and not sees_every_organization(user):
        raise NotFound(f"No organisation {reference!r}.")
    if need == "members" and not may_manage_members(user, membership):
        raise Forbidden(
            f"Only owners, user admins and {organization.name}'s organisation admins and user admins manage its "
            "members."
        )
    return organization


def require_owner(user: User) -> None:
    if not user.is_owner:
        raise Forbidden("Only owners create, change and delete organisations.")


def may_manage_members(user: User, membership: OrganizationMember | None) -> bool:
    if user.is_user_admin:
        return True
    return membership is not None and bool(MEMBER_MANAGERS & set(membership.roles))


def create_organization(actor: User, fields: OrganizationFields) -> Organization:
    """A new organisation with its Everyone group; whoever creates it is its first member, as its admin (Coder's
    rule), so it shows among their organisations and they can hand it on."""
    _check(fields, creating=True)
    name = (fields.name or "").strip()
    _refuse_taken(name)
    organization = Organization(
        name=name,
        display_name=(fields.display_name or "").strip() or name,
        description=(fields.description or "").strip(),
        icon=(fields.icon or "").strip(),
    )
    db.session.add(organization)
    db.session.flush()
    # Everyone's id is the organisation's: its members are the organisation's (app/groups/models.py).
    db.session.add(Group(id=organization.id, organization_id=organization.id, name=EVERYONE))
    db.session.add(OrganizationMember(organization_id=organization.id, user_id=actor.id, roles=[ORG_ROLE_ADMIN]))
    _commit(name)
    return organization


def update_organization(organization: Organization, fields: OrganizationFields) -> Organization:
    _check(fields, creating=False)
    if fields.name is not None and fields.name.strip() != organization.name:
        _refuse_taken(fields.name.strip(), organization)
        organization.name = fields.name.strip()
    if fields.display_name is not None:
        organization.display_name = fields.display_name.strip() or organization.name
    if fields.description is not None:
        organization.description = fields.description.strip()
    if fields.icon is not None:
        organization.icon = fields.icon.strip()
    _commit(organization.name)
    return organization


def delete_organization(organization: Organization) -> None:
    """Delete an organisation that holds no template and no workspace (409 naming them otherwise); the default one
    stays. Its members, groups, provisioner daemons and keys go with it (ON DELETE CASCADE). Deleted templates are
    kept for the history of their deleted workspaces: they move to the default organisation, where nobody sees
    them (a deleted template is in no list) and nothing can use them, and so do its finished provisioner jobs (the
    history of builds and imports); while a job of it is queued or running it is refused."""
    if organization.is_default:
        raise InvalidInput("The default organisation cannot be deleted: every person belongs to it.")
    _refuse_while_in_use(organization)
    members = list(
        db.session.scalars(
            select(OrganizationMember.user_id).where(OrganizationMember.organization_id == organization.id)
        )
    )
    for model in (Template, ProvisionerJob):  # only deleted templates and finished jobs are left (checked above)
        db.session.execute(
            update(model)
            .where(model.organization_id == organization.id)
            .values(organization_id=DEFAULT_ORGANIZATION_ID)
            .execution_options(synchronize_session=False)
        )
    db.session.delete(organization)
    try:
        db.session.commit()
    except IntegrityError as exc:  # a template was pushed to it meanwhile
        db.session.rollback()
        raise Conflict(f"{organization.name} changed meanwhile (a template was added): try again.") from exc
    # Whatever its groups granted, and its members' ways into its workspaces, end now.
    for user_id in members:
        access_lost(user_id=user_id)


def _refuse_while_in_use(organization: Organization) -> None:
    templates = list(
        db.session.scalars(
            select(Template.name)
            .where(Template.organization_id == organization.id, Template.deleted_at.is_(None))
            .order_by(Template.name)
            .limit(NAMES_SHOWN + 1)
        )
    )
    workspaces = db.session.scalar(
        select(func.count())
        .select_from(Workspace)
        .join(Template, Template.id == Workspace.template_id)
        .where(Template.organization_id == organization.id, Workspace.deleted.is_(False))
    )
    unfinished = db.session.scalar(
        select(func.count())
        .select_from(ProvisionerJob)
        .where(ProvisionerJob.organization_id == organization.id, ProvisionerJob.completed_at.is_(None))
    )
    if not templates and not workspaces and not unfinished:
        return
    held = []
    if unfinished:
        held.append(f"{unfinished} provisioner job{'s' if unfinished != 1 else ''} queued or running")
    if workspaces:
        held.append(f"{workspaces} workspace{'s' if workspaces != 1 else ''}")
    if templates:
        names = ", ".join(templates[:NAMES_SHOWN]) + (", …" if len(templates) > NAMES_SHOWN else "")
        held.append(f"templates ({names})")
    raise Conflict(
        f"Organisation {organization.name} still holds {' and '.join(held)}: delete them before the organisation"
        + (" (cancel its jobs, or let them finish)." if unfinished else ".")
    )


def members_query(organization: Organization, text: str = "") -> Select[User]:
    """The organisation's members by username, optionally those whose username or email contains ``text``."""
    ids = select(OrganizationMember.user_id).where(OrganizationMember.organization_id == organization.id)
    query = select(User).where(User.id.in_(ids)).order_by(User.username, User.id)
    return query.where(named_like(text.strip())) if text.strip() else query


def memberships(organization: Organization, users: Iterable[User]) -> dict[str, OrganizationMember]:
    """These people's membership rows in the organisation, by user id, in one query."""
    ids = [user.id for user in users]
    if not ids:
        return {}
    rows = db.session.scalars(
        select(OrganizationMember).where(
            OrganizationMember.organization_id == organization.id, OrganizationMember.user_id.in_(ids)
        )
    )
    return {row.user_id: row for row in rows}


def get_membership(organization: Organization, user: User) -> OrganizationMember:
    membership = db.session.get(OrganizationMember, (organization.id, user.id))
    if membership is None:
        raise NotFound(f"{user.username} is not a member of {organization.name}.")
    return membership


def add_member(organization: Organization, user: User) -> OrganizationMember:
    """Make ``user`` a member (with no organisation role); 409 if they already are."""
    if user.id in SYSTEM_USER_IDS:
        raise NotFound("No such user.")
    if db.session.get(OrganizationMember, (organization.id, user.id)) is not None:
        raise Conflict(f"{user.username} is already a member of {organization.name}.")
    membership = OrganizationMember(organization_id=organization.id, user_id=user.id, roles=[])
    db.session.add(membership)
    try:
        db.session.commit()
    except IntegrityError as exc:  # added by someone else just now
        db.session.rollback()
        raise Conflict(f"{user.username} is already a member of {organization.name}.") from exc
    return membership


def remove_member(actor: User, organization: Organization, user: User) -> None:
    """Take ``user`` out of the organisation and of its groups. Refused in the default organisation (everyone
    belongs to it), while they own workspaces in it (Coder's rule: their workspaces would be nobody's), and for an
    organisation admin unless ``actor`` may make admins."""
    if organization.is_default:
        raise InvalidInput(f"Everyone belongs to {organization.name}, the default organisation: suspend the account.")
    membership = get_membership(organization, user)
    if ORG_ROLE_ADMIN in membership.roles:
        _require_may_grant_admin(actor, organization)
    owned = db.session.scalar(
        select(func.count())
        .select_from(Workspace)
        .join(Template, Template.id == Workspace.template_id)
        .where(Workspace.owner_id == user.id, Template.organization_id == organization.id, Workspace.deleted.is_(False))
    )
    if owned:
        raise Conflict(
            f"{user.username} owns {owned} workspace{'s' if owned != 1 else ''} in {organization.name}: delete or "
            "hand them over before removing them."
        )
    in_groups = select(Group.id).where(Group.organization_id == organization.id)
    db.session.execute(delete(GroupMember).where(GroupMember.user_id == user.id, GroupMember.group_id.in_(in_groups)))
    db.session.delete(membership)
    db.session.commit()
    access_lost(user_id=user.id)


def set_member_roles(actor: User, organization: Organization, user: User, roles: Iterable[str]) -> OrganizationMember:
    """Replace the member's organisation roles. Unknown roles are a 400 naming the valid ones; giving or taking
    ``organization-admin`` needs an owner, a user admin or an organisation admin."""
    wanted = list(dict.fromkeys(role.strip() for role in roles))
    unknown = [role for role in wanted if role not in ORG_ROLES]
    if unknown:
        valid = ", ".join(ORG_ROLES)
        raise InvalidInput(
            f"Unknown organisation role{'s' if len(unknown) != 1 else ''} {', '.join(map(repr, unknown))}: the roles "
            f"are {valid}.",
            validations=[{"field": "roles", "detail": f"Use some of: {valid}."}],
        )
    membership = get_membership(organization, user)
    if (ORG_ROLE_ADMIN in wanted) != (ORG_ROLE_ADMIN in membership.roles):
        _require_may_grant_admin(actor, organization)
    membership.roles = [role for role in ORG_ROLES if role in wanted]
    db.session.commit()
    return membership


def _require_may_grant_admin(actor: User, organization: Organization) -> None:
    if actor.is_user_admin:
        return
    membership = db.session.get(OrganizationMember, (organization.id, actor.id))
    if membership is None or ORG_ROLE_ADMIN not in membership.roles:
        raise Forbidden(
            f"Only owners, user admins and {organization.name}'s organisation admins make or unmake its admins."
        )


def _check(fields: OrganizationFields, *, creating: bool) -> None:
    errors = FieldErrors()
    if fields.name is not None or creating:
        name = (fields.name or "").strip()
        if not 1 <= len(name) <= MAX_NAME or not USERNAME_PATTERN.match(name):
            errors.add(
                "name", f"Use 1-{MAX_NAME} letters, digits and single hyphens, not starting or ending with a hyphen."
            )
        elif _looks_like_an_id(name):
            errors.add("name", "A name must not look like an id: paths take either.")
    limits = (("display_name", fields.display_name, MAX_DISPLAY_NAME), ("description", fields.description,
              MAX_DESCRIPTION), ("icon", fields.icon, MAX_ICON))  # fmt: skip
    for field_name, value, limit in limits:
        if value is None:
            continue
        problem = text_problem(value)
        if problem:
            errors.add(field_name, problem)
        elif len(value.strip()) > limit:
            errors.add(field_name, f"Use at most {limit} characters.")
    icon = (fields.icon or "").strip()
    if icon and not icon.startswith(("https://", "http://", "/")):
        errors.add("icon", "Use an http(s) URL or a path on this server (/icon/…).")
    errors.raise_if_any()


def _looks_like_an_id(name: str) -> bool:
    try:
        uuid.UUID(name)
    except ValueError:
        return False
    return True


def _refuse_taken(name: str, renamed: Organization | None = None) -> None:
    """Names are unique whatever their case; ``default`` always means the default organisation in paths, so no
    other may take it."""
    if name.lower() == DEFAULT_ORGANIZATION_NAME and (renamed is None or not renamed.is_default):
        raise Conflict(
            f"{name!r} always means the default organisation.",
            validations=[{"field": "name", "detail": "This name is reserved."}],
        )
    taken = db.session.scalar(select(Organization.id).where(func.lower(Organization.name) == name.lower()))
    if taken is not None and (renamed is None or taken != renamed.id):
        raise Conflict(
            f"An organisation named {name!r} already exists.",
            validations=[{"field": "name", "detail": "This name is taken."}],
        )


def _commit(name: str) -> None:
    try:
        db.session.commit()
    except IntegrityError as exc:  # a concurrent request took the name
        db.session.rollback()
        raise Conflict(f"An organisation named {name!r} already exists.") from exc
