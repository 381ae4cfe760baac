"""Bearer tokens: issue (the secret is returned once), resolve on each request, list, revoke."""

from __future__ import annotations

import hashlib
import hmac
import secrets
from datetime import datetime, timedelta

from sqlalchemy import Select, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import joinedload

from app.core.columns import utcnow
from app.core.errors import Conflict, InvalidInput, NotFound, Unauthorized
from app.core.extensions import db
from app.core.validation import text_problem
from app.users.models import KIND_SESSION, KIND_TOKEN, STATUS_ACTIVE, ApiKey, BrowserSession, User

INVALID_TOKEN = "The session token is invalid or has expired. Sign in again."  # noqa: S105 - a message
# last_used_at is written at most this often, so a busy client does not turn every read into a write.
LAST_USED_RESOLUTION = timedelta(minutes=1)


def record_use(credential: ApiKey | BrowserSession, now: datetime) -> None:
    """Stamp the credential's last use and its user's "last seen" (the users page shows it), throttled.

    Both are checked, so that a person whose credential was stamped just before ``last_seen_at`` existed still shows.
    """
    user = credential.user
    if _stale(credential.last_used_at, now) or _stale(user.last_seen_at, now):
        credential.last_used_at = now
        user.last_seen_at = now
        db.session.commit()


def _stale(stamp: datetime | None, now: datetime) -> bool:
    return stamp is None or now - stamp > LAST_USED_RESOLUTION


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def new_credential() -> tuple[str, str]:
    """A fresh ``(lookup_id, secret)``: the lookup id finds the row, the secret proves the holder."""
    return secrets.token_hex(5), secrets.token_urlsafe(16)


def split_credential(raw: str) -> tuple[str, str] | None:
    """``(lookup_id, secret)`` of a ``<lookup_id>-<secret>`` credential, or None when it has not that shape."""
    lookup_id, sep, secret = raw.strip().partition("-")
    if text_problem(lookup_id):  # never issued, and PostgreSQL would refuse to look it up
        return None
    return (lookup_id, secret) if sep and lookup_id and secret else None


def issue_token(user: User, *, kind: str, lifetime_seconds: int, name: str | None = None) -> tuple[ApiKey, str]:
    lookup_id, secret = new_credential()
    key = ApiKey(
        lookup_id=lookup_id,
        secret_hash=hash_secret(secret),
        user_id=user.id,
        kind=kind,
        name=name,
        expires_at=utcnow() + timedelta(seconds=lifetime_seconds),
    )
    db.session.add(key)
    try:
        db.session.commit()
    except IntegrityError as exc:
        db.session.rollback()
        raise Conflict(f"You already have a token named {name!r}.") from exc
    return key, f"{lookup_id}-{secret}"


def create_api_token(
    user: User, name: str, lifetime_seconds: int | None, *, default: int, maximum: int
) -> tuple[ApiKey, str]:
    name = name.strip()
    if not 1 <= len(name) <= 64:
        raise InvalidInput("Invalid token name.", validations=[{"field": "name", "detail": "Use 1-64 characters."}])
    lifetime = default if lifetime_seconds is None else lifetime_seconds
    if not 0 < lifetime <= maximum:
        raise InvalidInput(
            "Invalid token lifetime.",
            validations=[{"field": "lifetime_seconds", "detail": f"Use 1 to {maximum} seconds."}],
        )
    if db.session.scalar(select(ApiKey.id).where(ApiKey.user_id == user.id, ApiKey.name == name)):
        raise Conflict(f"You already have a token named {name!r}.")
    return issue_token(user, kind=KIND_TOKEN, lifetime_seconds=lifetime, name=name)


def resolve_token(raw: str) -> User:
    """The active user owning this bearer token, or :class:`Unauthorized`."""
    parts = split_credential(raw)
    if parts is None:
        raise Unauthorized(INVALID_TOKEN)
    lookup_id, secret = parts
    # One query for key and user: this runs on every API call.
    key = db.session.scalar(select(ApiKey).options(joinedload(ApiKey.user)).where(ApiKey.lookup_id == lookup_id))
    if key is None or not hmac.compare_digest(key.secret_hash, hash_secret(secret)):
        raise Unauthorized(INVALID_TOKEN)
    now = utcnow()
    if key.expires_at <= now:
        raise Unauthorized(INVALID_TOKEN)
    if key.user.status != STATUS_ACTIVE:
        raise Unauthorized("This account is suspended.")
    record_use(key, now)
    user: User = key.user
    return user


def api_tokens_query(user: User) -> Select[ApiKey]:
    """``user``'s own API tokens (never anyone else's), oldest first, then by id so that pages never overlap."""
    return (
        select(ApiKey)
        .where(ApiKey.user_id == user.id, ApiKey.kind == KIND_TOKEN)
        .order_by(ApiKey.created_at, ApiKey.id)
    )


def revoke_api_token(user: User, token_id: str) -> None:
    key = db.session.scalar(
        select(ApiKey).where(ApiKey.id == token_id, ApiKey.user_id == user.id, ApiKey.kind == KIND_TOKEN)
    )
    if key is None:
        raise NotFound("No such token.")
    db.session.delete(key)
    db.session.commit()


def issue_session_token(user: User, lifetime_seconds: int) -> str:
    return issue_token(user, kind=KIND_SESSION, lifetime_seconds=lifetime_seconds)[1]


def revoke_session_token(raw: str) -> None:
    lookup_id = raw.strip().partition("-")[0]
    key = db.session.scalar(select(ApiKey).where(ApiKey.lookup_id == lookup_id, ApiKey.kind == KIND_SESSION))
    if key is not None:
        db.session.delete(key)
        db.session.commit()
