from __future__ import annotations

from datetime import datetime
from typing import Literal

from sqlalchemy import ForeignKey, Integer, String, UniqueConstraint
from sqlalchemy.orm import Mapped, mapped_column

from app.core.columns import IdColumn, UTCDateTime, new_id, utcnow
from app.core.extensions import Model

EVERYONE = "Everyone"
# Where a group's membership comes from: people (owners, user-admins) or the identity provider's groups claim,
# which rewrites it at every sign-in and so refuses edits by hand.
GroupSource = Literal["user", "oidc"]
SOURCE_USER: GroupSource = "user"
SOURCE_OIDC: GroupSource = "oidc"
GROUP_SOURCES: tuple[GroupSource, ...] = (SOURCE_USER, SOURCE_OIDC)


class Group(Model):
    """A named set of people in one organisation. The organisation's Everyone group is a row too (its id is the
    organisation's, as in Coder) so that access lists can name it, but it has no member rows: its members are the
    organisation's (organization_members)."""

    __tablename__ = "groups"
    __table_args__ = (UniqueConstraint("organization_id", "name", name="uq_groups_organization_id_name"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    organization_id: Mapped[str] = mapped_column(ForeignKey("organizations.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(64))
    display_name: Mapped[str] = mapped_column(String(128), default="", server_default="")
    avatar_url: Mapped[str] = mapped_column(String(256), default="", server_default="")
    # Workspace quota credits each member gets from this group (the quotas issue sums them).
    quota_allowance: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    source: Mapped[str] = mapped_column(String(8), default=SOURCE_USER, server_default=SOURCE_USER)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)

    @property
    def is_everyone(self) -> bool:
        return self.id == self.organization_id


class GroupMember(Model):
    __tablename__ = "group_members"

    # The key serves "who is in G" (the members page); the index serves "which groups is U in", the inner query
    # of every access check.
    group_id: Mapped[str] = mapped_column(ForeignKey("groups.id", ondelete="CASCADE"), primary_key=True)
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), primary_key=True, index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)


# What an access-list entry grants, on a template or a workspace: ``use`` (see it, create from it / connect to it,
# start and stop) or ``admin`` (also manage it). The same two words as Coder's.
AclRole = Literal["use", "admin"]
ACL_USE: AclRole = "use"
ACL_ADMIN: AclRole = "admin"
ACL_ROLES: tuple[AclRole, ...] = (ACL_USE, ACL_ADMIN)
# The SQL that keeps an access-list row about exactly one subject, a person or a group.
ONE_SUBJECT = "(user_id IS NULL) <> (group_id IS NULL)"
