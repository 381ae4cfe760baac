from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, String
from sqlalchemy.orm import Mapped, mapped_column

from app.columns import IdColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.extensions import db

ROLE_OWNER = "owner"
ROLE_TEMPLATE_ADMIN = "template-admin"
ROLE_MEMBER = "member"
# Every user is a member; the other roles are granted on top.
ASSIGNABLE_ROLES = (ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
ALL_ROLES = (ROLE_OWNER, ROLE_TEMPLATE_ADMIN, ROLE_MEMBER)

STATUS_ACTIVE = "active"
STATUS_SUSPENDED = "suspended"


class User(db.Model):  # type: ignore[name-defined,misc]
    __tablename__ = "users"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    username: Mapped[str] = mapped_column(String(32), unique=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    roles: Mapped[list[str]] = mapped_column(JSON, default=list)
    status: Mapped[str] = mapped_column(String(16), default=STATUS_ACTIVE)
    login_type: Mapped[str] = mapped_column(String(16), default="password")
    # The identity provider's `sub` once the person signed in with OpenID Connect (links the two accounts).
    oidc_subject: Mapped[str | None] = mapped_column(String(255), unique=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    last_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    # flask-login protocol, spelled out. Browser sessions are rows of their own (app/auth/browser_sessions.py): the
    # id flask-login keeps in the cookie is the session's credential, set by app.auth.access.sign_in_browser.
    @property
    def is_authenticated(self) -> bool:
        return True

    @property
    def is_active(self) -> bool:
        return self.status == STATUS_ACTIVE

    @property
    def is_anonymous(self) -> bool:
        return False

    def get_id(self) -> str:
        return self.id

    @property
    def all_roles(self) -> list[str]:
        return [role for role in ALL_ROLES if role in self.roles or role == ROLE_MEMBER]

    def has_role(self, *roles: str) -> bool:
        return any(role in self.all_roles for role in roles)

    @property
    def is_owner(self) -> bool:
        return ROLE_OWNER in self.roles

    @property
    def is_template_admin(self) -> bool:
        return self.has_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "username": self.username,
            "email": self.email,
            "roles": self.all_roles,
            "status": self.status,
            "login_type": self.login_type,
            "created_at": rfc3339(self.created_at),
            "last_seen_at": rfc3339(self.last_seen_at),
        }
