""" "Forgot password": a single-use link, valid for an hour, sent to the account's email. Only a SHA-256 of the
link's secret is stored; using it sets the password, signs the person out everywhere and deletes their links."""

from __future__ import annotations

import hmac
from datetime import timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import joinedload

from app.core.columns import utcnow
from app.core.errors import NotFound
from app.core.extensions import db
from app.core.validation import FieldErrors, check_password
from app.users.models import STATUS_ACTIVE, PasswordReset, User
from app.users.services import find_by_login, set_password
from app.users.tokens import hash_secret, new_credential, split_credential

RESET_LIFETIME = timedelta(hours=1)
INVALID_RESET = "This password reset link is not valid: it may have been used already, or have expired. Ask again."


def start_reset(email: str) -> tuple[User, str] | None:
    """A reset link's credential for the active password account with this email, or None when there is none
    (the caller answers the same either way, so that nobody learns which emails have accounts)."""
    email = email.strip().lower()
    user = find_by_login(email) if "@" in email else None
    if user is None or user.status != STATUS_ACTIVE or user.password_hash is None:
        return None
    now = utcnow()
    db.session.execute(delete(PasswordReset).where(PasswordReset.user_id == user.id, PasswordReset.expires_at <= now))
    lookup_id, secret = new_credential()
    db.session.add(
        PasswordReset(
            lookup_id=lookup_id,
            secret_hash=hash_secret(secret),
            user_id=user.id,
            created_at=now,
            expires_at=now + RESET_LIFETIME,
        )
    )
    db.session.commit()
    return user, f"{lookup_id}-{secret}"


def open_reset(credential: str) -> PasswordReset:
    """The live reset behind a link's credential, or a 404 that says to ask again."""
    parts = split_credential(credential)
    if parts is None:
        raise NotFound(INVALID_RESET)
    found = db.session.scalar(
        select(PasswordReset).options(joinedload(PasswordReset.user)).where(PasswordReset.lookup_id == parts[0])
    )
    if (
        found is None
        or not hmac.compare_digest(found.secret_hash, hash_secret(parts[1]))
        or found.expires_at <= utcnow()
        or found.user.status != STATUS_ACTIVE
    ):
        raise NotFound(INVALID_RESET)
    return found


def finish_reset(credential: str, new_password: str, confirmation: str) -> User:
    """Set the password a reset link's holder chose; every session of theirs ends and every link of theirs goes."""
    reset = open_reset(credential)
    errors = FieldErrors()
    check_password(errors, new_password)
    if new_password != confirmation:
        errors.add("confirm_password", "The passwords do not match.")
    errors.raise_if_any()
    user = reset.user
    # The claim: deleting this link succeeds once, so two submissions cannot both set a password.
    claimed = db.session.execute(delete(PasswordReset).where(PasswordReset.id == reset.id))
    if getattr(claimed, "rowcount", 0) != 1:
        db.session.rollback()
        raise NotFound(INVALID_RESET)
    db.session.execute(delete(PasswordReset).where(PasswordReset.user_id == user.id))
    set_password(user, new_password)
    db.session.commit()
    return user
