from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Connection, ForeignKey, Index, String, UniqueConstraint, event, false, insert
from sqlalchemy.orm import Mapped, Mapper, mapped_column, relationship

from app.core.columns import IdColumn, UTCDateTime, new_id, rfc3339, utcnow
from app.core.extensions import Model
from app.organizations.models import DEFAULT_ORGANIZATION_ID, OrganizationMember
from protocol.codec import JsonObject

ROLE_OWNER = "owner"
ROLE_TEMPLATE_ADMIN = "template-admin"
# Manages people and groups (create, suspend, roles below owner, group membership), not templates.
ROLE_USER_ADMIN = "user-admin"
# Reads everything an owner reads (audit, connection log, insights) and changes nothing.
ROLE_AUDITOR = "auditor"
ROLE_MEMBER = "member"
# Every user is a member; the other roles are granted on top.
ASSIGNABLE_ROLES = (ROLE_OWNER, ROLE_TEMPLATE_ADMIN, ROLE_USER_ADMIN, ROLE_AUDITOR)
ALL_ROLES = (ROLE_OWNER, ROLE_TEMPLATE_ADMIN, ROLE_USER_ADMIN, ROLE_AUDITOR, ROLE_MEMBER)

STATUS_ACTIVE = "active"
STATUS_SUSPENDED = "suspended"

# The system user that owns prebuilt workspaces until a person claims one (app/prebuilds). Not a person: no
# password and login type "none" (no way to sign in), no organisation membership (so in no group), left out of the
# users list and of the count that decides whether the first-run setup is due. Seeded by migration 0048 and by
# app/server/schema.py's seed_rows, with this fixed id so that every replica and every database agree on it.
PREBUILDS_USER_ID = "5e1f0b1d-0c2a-4f6e-9b8d-7a3c2e1f0b42"
PREBUILDS_USERNAME = "prebuilds"
PREBUILDS_EMAIL = "prebuilds@system.slipway.invalid"
LOGIN_TYPE_NONE = "none"
SYSTEM_USER_IDS = (PREBUILDS_USER_ID,)


class User(Model):
    __tablename__ = "users"
    # The users list's order (username, then id, as every list ends): a deep page is read from here by key.
    __table_args__ = (Index("ix_users_username_id", "username", "id"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    username: Mapped[str] = mapped_column(String(32), unique=True)
    email: Mapped[str] = mapped_column(String(254), unique=True)
    password_hash: Mapped[str | None] = mapped_column(String(255))
    roles: Mapped[list[str]] = mapped_column(JSON, default=list)
    status: Mapped[str] = mapped_column(String(16), default=STATUS_ACTIVE)
    login_type: Mapped[str] = mapped_column(String(16), default="password")
    # The identity provider's `sub` once the person signed in with OpenID Connect (links the two accounts).
    oidc_subject: Mapped[str | None] = mapped_column(String(255), unique=True)
    # Set by an owner ("Allow single sign-on linking"): until then, a sign-in through the provider whose verified
    # email matches links this account without its password. Cleared once linked; it expires by itself.
    oidc_link_allowed_until: Mapped[datetime | None] = mapped_column(UTCDateTime)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    updated_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow, onupdate=utcnow)
    last_seen_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # When the templates' autostop requirement stops this person's workspaces (a daily ``CRON_TZ=… M H * * *``);
    # None = midnight UTC.
    quiet_hours_schedule: Mapped[str | None] = mapped_column(String(128))
    # Set when an admin chose the password (a new account's, or a reset): until the person picks their own, their
    # sessions and tokens reach only the password change and sign-out (app/auth/access.py).
    must_change_password: Mapped[bool] = mapped_column(Boolean, default=False, server_default=false())

    # flask-login protocol, spelled out. Browser sessions are rows of their own (app/users/browser_sessions.py): the
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
    def is_system(self) -> bool:
        return self.id in SYSTEM_USER_IDS

    @property
    def oidc_link_allowed(self) -> bool:
        return self.oidc_link_allowed_until is not None and self.oidc_link_allowed_until > utcnow()

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

    @property
    def is_user_admin(self) -> bool:
        return self.has_role(ROLE_OWNER, ROLE_USER_ADMIN)

    @property
    def is_auditor(self) -> bool:
        return ROLE_AUDITOR in self.roles

    @property
    def reads_everything(self) -> bool:
        """Owners and auditors: every page and API an owner reads (the audit log among them)."""
        return self.has_role(ROLE_OWNER, ROLE_AUDITOR)

    @property
    def is_read_only(self) -> bool:
        """An auditor with no role that changes things: every write is refused them (app/auth/blueprints.py).
        Another role on top wins, so that an owner given the auditor role is not locked out of undoing it."""
        return self.is_auditor and not self.has_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN, ROLE_USER_ADMIN)

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "username": self.username,
            "email": self.email,
            "roles": self.all_roles,
            "status": self.status,
            "login_type": self.login_type,
            "must_change_password": self.must_change_password,
            "created_at": rfc3339(self.created_at),
            "last_seen_at": rfc3339(self.last_seen_at),
        }


@event.listens_for(User, "after_insert")
def _join_default_organization(mapper: Mapper[Any], connection: Connection, user: User) -> None:
    """Every person is a member of the default organisation (and so of its Everyone group), however the row was
    made: the sign-up form, the API, OpenID sign-up, a test or a benchmark's seed. In the same flush, so a user
    without a membership never exists."""
    connection.execute(
        insert(OrganizationMember).values(
            organization_id=DEFAULT_ORGANIZATION_ID, user_id=user.id, roles=[], created_at=utcnow(), updated_at=utcnow()
        )
    )


# A session token comes from signing in (CLI or API); an API token is one a user created by name.
KIND_SESSION = "session"
KIND_TOKEN = "token"  # noqa: S105 - a kind label, not a secret


class ApiKey(Model):
    """A bearer credential ``<lookup_id>-<secret>``; only a SHA-256 of the secret is stored."""

    __tablename__ = "api_keys"
    __table_args__ = (UniqueConstraint("user_id", "name", name="uq_api_keys_user_id_name"),)

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    lookup_id: Mapped[str] = mapped_column(String(16), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    kind: Mapped[str] = mapped_column(String(16))
    # Session tokens have no name; NULLs never collide in the (user_id, name) constraint.
    name: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)

    user: Mapped[User] = relationship()

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "name": self.name,
            "kind": self.kind,
            "created_at": rfc3339(self.created_at),
            "expires_at": rfc3339(self.expires_at),
            "last_used_at": rfc3339(self.last_used_at),
        }


class BrowserSession(Model):
    """A signed-in browser. Its cookie carries ``<lookup_id>-<secret>``; only a SHA-256 of the secret is stored, so
    signing out (deleting the row) ends the session on the server, not just in the browser that asked."""

    __tablename__ = "browser_sessions"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    lookup_id: Mapped[str] = mapped_column(String(16), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    last_used_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    # Shown on the Account page so that a person can tell their browsers apart; never used to decide anything.
    user_agent: Mapped[str] = mapped_column(String(255), default="")

    user: Mapped[User] = relationship()


class UserInvitation(Model):
    """An invitation to join by email, with the roles the person will have. Its link carries
    ``<lookup_id>-<secret>``; only a SHA-256 of the secret is stored. Accepting it (once) makes the account."""

    __tablename__ = "user_invitations"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    lookup_id: Mapped[str] = mapped_column(String(16), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    email: Mapped[str] = mapped_column(String(254), index=True)
    roles: Mapped[list[str]] = mapped_column(JSON, default=list)
    invited_by_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)
    # Kept once used, so that a second click says "already used" rather than "unknown".
    accepted_at: Mapped[datetime | None] = mapped_column(UTCDateTime)
    accepted_user_id: Mapped[str | None] = mapped_column(ForeignKey("users.id", ondelete="SET NULL"))

    invited_by: Mapped[User | None] = relationship(foreign_keys=[invited_by_id])

    @property
    def expired(self) -> bool:
        return self.expires_at <= utcnow()

    def to_json(self) -> JsonObject:
        return {
            "id": self.id,
            "email": self.email,
            "roles": [*self.roles, ROLE_MEMBER],
            "invited_by": self.invited_by.username if self.invited_by else None,
            "created_at": rfc3339(self.created_at),
            "expires_at": rfc3339(self.expires_at),
            "accepted_at": rfc3339(self.accepted_at),
            "expired": self.expired,
        }


class PasswordReset(Model):
    """A "forgot password" link sent by email: ``<lookup_id>-<secret>``, only a SHA-256 of the secret stored; it is
    deleted when used, and every older one of the person with it."""

    __tablename__ = "password_resets"

    id: Mapped[str] = mapped_column(IdColumn, primary_key=True, default=new_id)
    lookup_id: Mapped[str] = mapped_column(String(16), unique=True)
    secret_hash: Mapped[str] = mapped_column(String(64))
    user_id: Mapped[str] = mapped_column(ForeignKey("users.id", ondelete="CASCADE"), index=True)
    created_at: Mapped[datetime] = mapped_column(UTCDateTime, default=utcnow)
    expires_at: Mapped[datetime] = mapped_column(UTCDateTime)

    user: Mapped[User] = relationship()
