"""Single sign-on with OpenID Connect (authlib): discovery, the authorization code flow with PKCE S256, and
turning the provider's claims into a Slipway user (linked, created, refused) with roles kept in sync.

authlib checks the state, exchanges the code with the PKCE verifier, and verifies the ID token's signature,
issuer, audience and nonce. What a sign-in may do with the claims is decided here, in plain functions.
"""

from __future__ import annotations

import logging
import re
import time
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from flask import Flask, current_app
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from app.core.config import Settings
from app.core.errors import DomainError
from app.core.extensions import db
from app.events.access import access_lost
from app.groups.sync import claim_values, sync_groups, synced_roles
from app.organizations.models import DEFAULT_ORGANIZATION_ID, Organization
from app.users.models import ASSIGNABLE_ROLES, ROLE_OWNER, STATUS_ACTIVE, User
from app.users.services import is_last_active_owner, user_count

if TYPE_CHECKING:
    from authlib.integrations.flask_client import OAuth

log = logging.getLogger(__name__)
CALLBACK_PATH = "/api/v2/users/oidc/callback"
PROVIDER_NAME = "oidc"
HTTP_TIMEOUT = 10
MAX_USERNAME = 32
# Time from the provider's callback to the password sign-in and confirmation of a link.
PENDING_LINK_LIFETIME = 600


class OidcError(DomainError):
    """A sign-in that cannot go on; the message is shown to the person on an error page."""

    status = 403


class ProviderUnavailable(OidcError):
    status = 502


@dataclass(frozen=True)
class PendingLink:
    """A provider identity waiting for the holder of account ``account_id`` to confirm linking it.

    It is kept in the browser's (signed) session between the provider's callback and the confirmation, so only
    the browser that signed in at the provider can finish it, and only for a few minutes.
    """

    issuer: str
    subject: str
    email: str
    account_id: str
    expires_at: float

    @classmethod
    def create(cls, settings: Settings, subject: str, email: str, account_id: str) -> PendingLink:
        expires_at = time.time() + PENDING_LINK_LIFETIME
        return cls(settings.oidc_issuer_url, subject, email, account_id, expires_at)

    @classmethod
    def from_session(cls, value: object) -> PendingLink | None:
        """The link stored by :meth:`to_session`, or None when there is none, it expired, or it is malformed."""
        if not isinstance(value, dict):
            return None
        try:
            link = cls(**value)
        except TypeError:
            return None
        return link if link.expires_at > time.time() else None

    def to_session(self) -> dict[str, Any]:
        return asdict(self)


class LinkNeeded(OidcError):
    """The verified email belongs to an account not linked yet: its holder must sign in and confirm the link."""

    status = 409

    def __init__(self, link: PendingLink) -> None:
        super().__init__("An account with this email address already exists. Sign in with its password to link it.")
        self.link = link


def init_app(app: Flask, settings: Settings) -> None:
    if not settings.oidc_enabled:
        return
    # Only when single sign-on is on: authlib is the heaviest import of a web worker's start.
    from authlib.integrations.flask_client import OAuth

    oauth = OAuth(app)
    oauth.register(
        PROVIDER_NAME,
        client_id=settings.oidc_client_id,
        client_secret=settings.oidc_client_secret or None,
        server_metadata_url=f"{settings.oidc_issuer_url}/.well-known/openid-configuration",
        client_kwargs={
            "scope": " ".join(settings.oidc_scopes),
            "code_challenge_method": "S256",
            "timeout": HTTP_TIMEOUT,
        },
    )
    app.extensions["slipway_oidc"] = oauth


def provider() -> Any:
    """The registered authlib client, with the provider's metadata loaded and its issuer checked."""
    oauth: OAuth | None = current_app.extensions.get("slipway_oidc")
    if oauth is None:
        raise OidcError("Single sign-on is not configured on this server.")
    client = oauth.create_client(PROVIDER_NAME)
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    try:
        metadata = client.load_server_metadata()
    except Exception as exc:  # connection refused, timeout, bad JSON: all mean "not reachable as a provider"
        log.warning("OIDC discovery at %s failed: %s", settings.oidc_issuer_url, exc)
        raise ProviderUnavailable(
            "The identity provider could not be reached. Try again later, or ask an administrator."
        ) from exc
    issuer = str(metadata.get("issuer", "")).rstrip("/")
    if issuer != settings.oidc_issuer_url:
        client.server_metadata.clear()  # read it again next time: the operator may be fixing this
        log.error("OIDC issuer mismatch: configured %s, provider says %s", settings.oidc_issuer_url, issuer)
        raise OidcError("The identity provider's issuer does not match this server's configuration.")
    return client


def end_session_url(client: Any) -> str:
    return str(client.server_metadata.get("end_session_endpoint") or "")


def sign_in(settings: Settings, claims: dict[str, Any]) -> User:
    """The user these claims belong to: found by subject, linked by verified email when allowed, or created.

    An email match alone never signs in to an account that is not linked yet: unless an owner allowed it, the
    account's holder must confirm with its password (:class:`LinkNeeded`).
    """
    subject, email = checked_identity(settings, claims)
    user = db.session.scalar(select(User).where(User.oidc_subject == subject))
    if user is None and email:
        existing = db.session.scalar(select(User).where(func.lower(User.email) == email))
        if existing is not None:
            user = _link_by_email(settings, existing, subject, email, claims)
    if user is None:
        user = _sign_up(settings, subject, email, claims)
    if user.status != STATUS_ACTIVE:
        db.session.rollback()
        raise OidcError("Your account is suspended. Ask an owner to reactivate it.")
    sync_roles(settings, claims, user)
    left = sync_groups_of(user, claims)
    db.session.commit()
    if left:
        access_lost(user_id=user.id)  # a workspace shared with a group they left is no longer theirs to enter
    return user


def checked_identity(settings: Settings, claims: dict[str, Any]) -> tuple[str, str]:
    """(subject, lower-case email) of claims this server accepts at all, or :class:`OidcError` saying why not."""
    subject = str(claims.get("sub") or "")
    if not subject:
        raise OidcError("The identity provider sent no subject (sub) claim.")
    email = str(claims.get(settings.oidc_email_field) or "").strip().lower()
    if not settings.oidc_ignore_email_verified and claims.get("email_verified") in (False, "false"):
        raise OidcError("Your email address is not verified by the identity provider.")
    if settings.oidc_email_domains:
        domain = email.rpartition("@")[2]
        if not email or domain not in settings.oidc_email_domains:
            raise OidcError(f"Accounts from {domain or 'your email domain'} may not sign in here.")
    return subject, email


def email_verified(claims: dict[str, Any]) -> bool:
    """Only an explicit yes counts: a provider that says nothing has not vouched for the address."""
    value = claims.get("email_verified")
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _link_by_email(settings: Settings, user: User, subject: str, email: str, claims: dict[str, Any]) -> User:
    """Link the account with this email to the identity, when that is safe; otherwise say what is missing."""
    if user.oidc_subject is not None:
        # Another identity at the provider holds this account: an email match never moves a link.
        raise OidcError("An account with this email address is linked to another identity. Ask an owner for help.")
    # --oidc-ignore-email-verified is about new accounts only: an existing account is never linked on an unverified
    # email, since anyone who can set that address at the provider would get in.
    if not email_verified(claims):
        raise OidcError(
            "Your identity provider does not confirm that your email address is verified, so it cannot be used to"
            " sign in to an existing account. Ask an owner for help."
        )
    if not user.oidc_link_allowed:
        raise LinkNeeded(PendingLink.create(settings, subject, email, user.id))
    user.oidc_subject = subject  # an owner vouched for this person (Allow single sign-on linking)
    user.oidc_link_allowed_until = None
    log.info("OIDC identity linked to %s by an owner's permission", user.username)
    return user


def _sign_up(settings: Settings, subject: str, email: str, claims: dict[str, Any]) -> User:
    if not settings.oidc_allow_signups:
        raise OidcError("Sign-ups are disabled on this server: ask an owner to create your account first.")
    if not email:
        raise OidcError(f"The identity provider sent no email address (claim {settings.oidc_email_field!r}).")
    # Nobody to hand out roles yet: the first person in becomes the owner, as on the setup page.
    roles = [ROLE_OWNER] if user_count() == 0 else []
    preferred = str(claims.get(settings.oidc_username_field) or email.partition("@")[0])
    user = User(
        username=unique_username(preferred),
        email=email,
        password_hash=None,
        roles=roles,
        login_type="oidc",
        oidc_subject=subject,
    )
    db.session.add(user)
    try:
        db.session.flush()
    except IntegrityError as exc:  # a concurrent sign-in of the same person
        db.session.rollback()
        raise OidcError("Your account was being created by another sign-in. Try again.") from exc
    log.info("OIDC sign-up: %s <%s>", user.username, email)
    return user


def unique_username(wanted: str) -> str:
    """A valid username (letters, digits, single hyphens) close to ``wanted`` that nobody has yet."""
    base = re.sub(r"[^a-zA-Z0-9]+", "-", wanted).strip("-")[:MAX_USERNAME].strip("-") or "user"
    candidate, number = base, 1
    while db.session.scalar(select(User.id).where(func.lower(User.username) == candidate.lower())):
        number += 1
        suffix = f"-{number}"
        candidate = base[: MAX_USERNAME - len(suffix)].strip("-") + suffix
    return candidate


def default_organization() -> Organization:
    organization = db.session.get(Organization, DEFAULT_ORGANIZATION_ID)
    assert organization is not None  # noqa: S101 - the migration creates it, and nothing deletes it
    return organization


def sync_roles(settings: Settings, claims: dict[str, Any], user: User) -> None:
    """Roles the mapping can grant follow the claim; other roles (given by hand) stay, and so does the last owner.
    The organisation's role sync (set by API or its admin page) wins over the deployment's --oidc-role-mapping."""
    roles = synced_roles(default_organization(), claims, user.roles)
    if roles is None:
        roles = _roles_from_settings(settings, claims, user.roles)
    if roles is None:
        return
    if ROLE_OWNER not in roles and is_last_active_owner(user):
        # A provider group emptied by mistake must not leave the deployment without an owner.
        log.warning("OIDC role sync kept the owner role of %s: they are the last active owner", user.username)
        roles.append(ROLE_OWNER)
    synced = [role for role in ASSIGNABLE_ROLES if role in roles]
    if synced != user.roles:
        user.roles = synced


def _roles_from_settings(settings: Settings, claims: dict[str, Any], current: list[str]) -> list[str] | None:
    if not settings.oidc_role_field or not settings.oidc_role_mapping:
        return None
    values = claim_values(claims, settings.oidc_role_field)
    mapped = {role for _, role in settings.oidc_role_mapping}
    granted = {role for idp_value, role in settings.oidc_role_mapping if idp_value in values}
    return sorted((set(current) - mapped) | granted)


def sync_groups_of(user: User, claims: dict[str, Any]) -> list[str]:
    """The organisation's group sync for ``user`` (in the sign-in's transaction); the groups they left."""
    change = sync_groups(default_organization(), user, claims)
    return change.left if change else []
