"""Invitations by email: an owner or user admin names an email and roles; the person opens the link (once, before
it expires), picks a username and a password, and has an account. Only a SHA-256 of the link's secret is stored."""

from __future__ import annotations

import hmac
import re
from collections.abc import Iterable
from datetime import timedelta

from sqlalchemy import Select, select, update
from sqlalchemy.orm import joinedload

from app.audit.recorder import ACTION_WRITE, change, record, user_actor
from app.core.columns import rfc3339, utcnow
from app.core.errors import Conflict, Forbidden, NotFound
from app.core.extensions import db
from app.core.validation import FieldErrors, check_email, text_problem
from app.users.models import ROLE_OWNER, User, UserInvitation
from app.users.services import create_user, normalise_roles
from app.users.tokens import hash_secret, new_credential, split_credential

INVITATION_LIFETIME = timedelta(days=7)
INVALID_INVITATION = "This invitation link is not valid: it may have been mistyped or revoked. Ask for a new one."
USED_INVITATION = "This invitation has already been used. Sign in instead, or ask for a new invitation."
EXPIRED_INVITATION = "This invitation has expired. Ask whoever invited you for a new one."


def invite(actor: User, email: str, roles: Iterable[str]) -> tuple[UserInvitation, str]:
    """A new invitation and the credential its link carries (shown or sent once, never stored)."""
    email = email.strip().lower()
    errors = FieldErrors()
    check_email(errors, email)
    errors.raise_if_any()
    role_list = normalise_roles(roles)
    if ROLE_OWNER in role_list and not actor.is_owner:
        # A user admin making an owner would hold, through that person, every right they lack.
        raise Forbidden("Only an owner may invite someone as an owner.")
    if db.session.scalar(select(User.id).where(User.email == email)):
        raise Conflict(
            "Someone with this email already has an account.",
            validations=[{"field": "email", "detail": "This email is already in use."}],
        )
    now = utcnow()
    # Inviting the same email again replaces the pending invitation: only the newest link works (row by row, so
    # that the audit log shows the old one go).
    replaced = select(UserInvitation).where(UserInvitation.email == email, UserInvitation.accepted_at.is_(None))
    for stale in db.session.scalars(replaced):
        db.session.delete(stale)
    lookup_id, secret = new_credential()
    invitation = UserInvitation(
        lookup_id=lookup_id,
        secret_hash=hash_secret(secret),
        email=email,
        roles=role_list,
        invited_by_id=actor.id,
        created_at=now,
        expires_at=now + INVITATION_LIFETIME,
    )
    db.session.add(invitation)
    db.session.commit()
    return invitation, f"{lookup_id}-{secret}"


def pending_invitations_query() -> Select[UserInvitation]:
    """Invitations not yet accepted (expired ones included, so that they can be seen and revoked), newest first."""
    return (
        select(UserInvitation)
        .options(joinedload(UserInvitation.invited_by))
        .where(UserInvitation.accepted_at.is_(None))
        .order_by(UserInvitation.created_at.desc(), UserInvitation.id)
    )


def revoke_invitation(invitation_id: str) -> None:
    invitation = None if text_problem(invitation_id) else db.session.get(UserInvitation, invitation_id)
    if invitation is None or invitation.accepted_at is not None:
        raise NotFound("No such pending invitation: it may have been accepted or revoked already.")
    db.session.delete(invitation)
    db.session.commit()


def open_invitation(credential: str) -> UserInvitation:
    """The invitation behind a link's credential, if it can still be accepted; else a 404 or 409 saying why."""
    parts = split_credential(credential)
    invitation = None
    if parts is not None:
        invitation = db.session.scalar(select(UserInvitation).where(UserInvitation.lookup_id == parts[0]))
    if parts is None or invitation is None or not hmac.compare_digest(invitation.secret_hash, hash_secret(parts[1])):
        raise NotFound(INVALID_INVITATION)
    if invitation.accepted_at is not None:
        raise Conflict(USED_INVITATION)
    if invitation.expires_at <= utcnow():
        raise Conflict(EXPIRED_INVITATION)
    return invitation


def suggested_username(email: str) -> str:
    """The part of the email before the @, made into a valid username (``ann.lee`` → ``ann-lee``)."""
    local = re.sub(r"[^a-zA-Z0-9]+", "-", email.partition("@")[0]).strip("-").lower()
    return local[:32].rstrip("-")


def accept_invitation(credential: str, username: str, password: str) -> User:
    """Make the invited person's account with the username and password they chose; the link then stops working.

    The claim is a conditional UPDATE, so that two tabs submitting at once make one account, not two."""
    invitation = open_invitation(credential)
    user = create_user(username, invitation.email, password, invitation.roles, commit=False)
    now = utcnow()
    claimed = db.session.execute(
        update(UserInvitation)
        .where(UserInvitation.id == invitation.id, UserInvitation.accepted_at.is_(None))
        .values(accepted_at=now, accepted_user_id=user.id)
    )
    if getattr(claimed, "rowcount", 0) != 1:
        db.session.rollback()
        raise Conflict(USED_INVITATION)
    # The claim is a statement, not a change of a loaded row: its audit entry is written here, naming the newcomer.
    diff = {"accepted_at": change(rfc3339(now)), "accepted_user_id": change(user.id)}
    record("user_invitation", invitation.id, invitation.email, ACTION_WRITE, diff, actor=user_actor(user))
    db.session.commit()
    return user


def invitation_link(access_url: str, credential: str) -> str:
    return f"{access_url.rstrip('/')}/invite/{credential}"
