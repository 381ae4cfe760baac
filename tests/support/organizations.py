"""A second organisation for tests, written the way the organisations' own create will make one: the
organisation, its Everyone group (the organisation's id, as Coder's) and its members."""

from __future__ import annotations

from collections.abc import Iterable

from flask import Flask

from app.core.extensions import db
from app.groups.models import Group
from app.organizations.models import Organization, OrganizationMember


def add_organization(app: Flask, name: str, member_ids: Iterable[str]) -> str:
    """Create organisation ``name`` with these users as members; its id."""
    with app.app_context():
        organization = Organization(name=name, display_name=name.title())
        db.session.add(organization)
        db.session.flush()
        db.session.add(Group(id=organization.id, organization_id=organization.id, name="Everyone"))
        for user_id in member_ids:
            db.session.add(OrganizationMember(organization_id=organization.id, user_id=user_id))
        db.session.commit()
        return organization.id
