"""Organisations and their members.

Which tables carry ``organization_id`` (as in Coder) and why the others do not:
- templates, provisioner daemons, provisioner keys and groups: each belongs to exactly one organisation, and
  lists and lookups filter on it.
- workspaces: scoped through their template (a workspace cannot change template, nor a template organisation),
  so the organisation is ``templates.organization_id`` and a second copy could only disagree with it.
- template versions, provisioner jobs, files: reached through their template or workspace; routing jobs to an
  organisation's own daemons is the organisations issue's, and it will add the column where routing needs it.
- users: belong to organisations through ``organization_members`` (a person may later join several).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, ForeignKey, String, Text
from sqlalchemy.orm import Mapped, mapped_column
from sqlalchemy.sql.expression import false

from app.core.columns import IdColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.core.extensions import Model
from protocol.codec import JsonObject

# The default organisation's id is the same on every deployment: the migration creates it with this id, and rows
# created without an organisation (every create before the organisations issue) land in it through the column
# defaults, with no lookup per insert. Its Everyone group has the same id (Coder's rule: Everyone's id is the
# organisation's).
DEFAULT_ORGANIZATION_ID = "00000000-0000-4000-8000-000000000001"
DEFAULT_ORGANIZATION_NAME = "default"

# Roles a person holds within one organisation (Coder's names); site-wide roles stay on users.roles.
ORG_ROLE_ADMIN = "organization-admin"
ORG_ROLE_TEMPLATE_ADMIN = "organization-template-admin"
ORG_ROLE_USER_ADMIN = "organization-user-admin"
ORG_ROLE_AUDITOR = "organization-auditor"
ORG_ROLES = (ORG_ROLE_ADMIN, ORG_ROLE_TEMPLATE_ADMIN, ORG_ROLE_USER_ADMIN, ORG_ROLE_AUDITOR)
# What the roles grant within their organisation (the rules are in app/catalog/access.py and app/groups/permissions.py):
# template admins (and organisation admins) do there all a site template admin does; auditors (and organisation
# admins) read everything there and, auditors, change nothing.
ORG_TEMPLATE_MANAGERS = (ORG_ROLE_ADMIN, ORG_ROLE_TEMPLATE_ADMIN)
ORG_READERS = (ORG_ROLE_ADMIN, ORG_ROLE_TEMPLATE_ADMIN, ORG_ROLE_AUDITOR)


class Organization(Model):
    __tablename__ = "organizations"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    # A slug (the username rules): URLs and the API accept it in place of the id.
    name: Mapped[str] = mapped_column(String(64), unique=True)
    display_name: Mapped[str] = mapped_column(String(128), default="")
    description: Mapped[str] = mapped_column(Text, default="", server_default="")
    icon: Mapped[str] = mapped_column(String(256), default="", server_default="")
    is_default: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    # IdP sync settings (Coder's /organizations/{org}/settings/idpsync/groups and /roles), applied at each OpenID
    # sign-in. Groups: {"field": str, "mapping": {idp_group: [group_id]}, "regex_filter": str | null,
    # "auto_create_missing_groups": bool}; roles: {"field": str, "mapping": {idp_role: [role]}}. Empty = off.
    group_sync: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")
    role_sync: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict, server_default="{}")

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "name": self.name,
            "display_name": self.display_name or self.name,
            "description": self.description,
            "icon": self.icon,
            "is_default": self.is_default,
            "created_at": rfc3339(self.created_at),
            "updated_at": rfc3339(self.updated_at),
        }


class OrganizationMember(Model):
    """A person's membership of an organisation, with their roles there. Every user is a member of the default
    organisation (app/users/models.py adds the row when a user is inserted), which makes them a member of its
    Everyone group."""

    __tablename__ = "organization_members"

    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"), primary_key=True)
    # "Which organisations is U in" (every access check) reads this index; the key serves "who is in O".
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True)
    roles: Mapped[list[str]] = mapped_column(JSON, default=list, server_default="[]")
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
