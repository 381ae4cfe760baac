"""Linking a provider identity to an existing account, after its holder confirms it: either they signed in with
its password after the provider matched their verified email, or they started linking from their Account page.
"""

from __future__ import annotations

import logging
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError

from app.auth.oidc import OidcError, PendingLink, checked_identity
from app.core.config import Settings
from app.core.errors import Conflict, Forbidden
from app.core.extensions import db
from app.users.models import User

log = logging.getLogger(__name__)
ALREADY_LINKED = "Your account is already linked to a single sign-on identity."
TAKEN = "This identity is already linked to another Slipway account."


def identity_to_link(settings: Settings, claims: dict[str, Any], user: User) -> PendingLink:
    """The identity a signed-in user brought back from the provider in link mode, waiting for their confirmation.

    The user proved the account by being signed in to it and the identity by signing in at the provider, so the
    email need not match; the same claim checks as for a sign-in apply, so nothing links that could not sign in.
    """
    subject, email = checked_identity(settings, claims)
    if user.oidc_subject is not None:
        raise OidcError(ALREADY_LINKED)
    if _holder(subject) is not None:
        raise OidcError(TAKEN)
    return PendingLink.create(settings, subject, email, user.id)


def link_identity(settings: Settings, user: User, link: PendingLink) -> None:
    """Set ``user``'s subject to the confirmed identity; the checks run again, as time passed since the callback."""
    if link.account_id != user.id:
        raise Forbidden("This sign-in identity was waiting for another account. Start again.")
    if link.issuer != settings.oidc_issuer_url:
        raise Conflict("The identity provider changed since this link was started. Start again.")
    if user.oidc_subject is not None:
        raise Conflict(ALREADY_LINKED)
    if _holder(link.subject) is not None:
        raise Conflict(TAKEN)
    user.oidc_subject = link.subject
    user.oidc_link_allowed_until = None
    try:
        db.session.commit()
    except IntegrityError as exc:  # the same identity confirmed for another account at the same moment
        db.session.rollback()
        raise Conflict(TAKEN) from exc
    log.info("OIDC identity <%s> linked to %s after the account holder confirmed", link.email, user.username)


def _holder(subject: str) -> str | None:
    holder: str | None = db.session.scalar(select(User.id).where(User.oidc_subject == subject))
    return holder
