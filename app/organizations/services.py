"""Finding organisations and who belongs to them. Plain values in, rows or domain errors out."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import Select, func, or_, select

from app.core.errors import NotFound
from app.core.extensions import db
from app.core.validation import text_problem
from app.organizations.models import (
    DEFAULT_ORGANIZATION_ID,
    DEFAULT_ORGANIZATION_NAME,
    Organization,
    OrganizationMember,
)


def get_organization(reference: str) -> Organization:
    """The organisation given by id or name, as Coder's ``/organizations/{organization}`` paths take it;
    ``default`` is the default organisation whatever it is called. Names are matched whatever their case (they are
    unique whatever their case: app/accounts/organizations.py)."""
    if text_problem(reference):
        raise NotFound("No such organisation.")
    if reference == DEFAULT_ORGANIZATION_NAME:
        found = db.session.get(Organization, DEFAULT_ORGANIZATION_ID)
    else:
        found = db.session.scalar(
            select(Organization).where(
                or_(Organization.id == reference, func.lower(Organization.name) == reference.lower())
            )
        )
    if found is None:
        raise NotFound(f"No organisation {reference!r}.")
    return found


def organization_ids_of(user_id: str) -> Select[str]:
    """The organisations ``user_id`` belongs to, as a subquery for access filters."""
    return select(OrganizationMember.organization_id).where(OrganizationMember.user_id == user_id)


def organizations_where(user_id: str, roles: Iterable[str]) -> list[str]:
    """The organisations in which ``user_id`` holds any of ``roles``. Read in Python rather than SQL: a person is in a
    handful of organisations, and a JSON-array test in SQL differs between SQLite and PostgreSQL."""
    wanted = set(roles)
    rows = db.session.execute(
        select(OrganizationMember.organization_id, OrganizationMember.roles).where(
            OrganizationMember.user_id == user_id
        )
    )
    return sorted(str(organization_id) for organization_id, held in rows if wanted.intersection(held or ()))


def is_member(organization_id: str, user_id: str) -> bool:
    return db.session.get(OrganizationMember, (organization_id, user_id)) is not None


def organization_names() -> dict[str, str]:
    """Every organisation's name by id, in name order (pages and reports that name them once there are several)."""
    rows = db.session.execute(select(Organization.id, Organization.name).order_by(Organization.name))
    return {str(organization_id): str(name) for organization_id, name in rows}
