"""Browser sessions kept on the server: a row per sign-in, so that signing out ends that session for good.

The cookie (signed by Flask, readable by its holder) carries only the session's ``<lookup_id>-<secret>``; the row
keeps a SHA-256 of the secret. Deleting the row is what signs a browser out: a copy of the cookie taken before
then is refused, and other browsers of the same person are untouched.
"""

from __future__ import annotations

import hmac
from datetime import timedelta

from sqlalchemy import Select, delete, select
from sqlalchemy.orm import joinedload

from app.core.columns import utcnow
from app.core.errors import NotFound
from app.core.extensions import db
from app.users.models import STATUS_ACTIVE, BrowserSession, User
from app.users.tokens import hash_secret, new_credential, record_use, split_credential

USER_AGENT_LENGTH = 255


def start_browser_session(user: User, *, lifetime_seconds: int, user_agent: str) -> str:
    """Record a new session for ``user`` and return the credential its cookie carries (the secret is not kept)."""
    now = utcnow()
    # Expired sessions of this person go now: no background job needed to keep the table small.
    expired = delete(BrowserSession).where(BrowserSession.user_id == user.id, BrowserSession.expires_at <= now)
    db.session.execute(expired)
    lookup_id, secret = new_credential()
    db.session.add(
        BrowserSession(
            lookup_id=lookup_id,
            secret_hash=hash_secret(secret),
            user_id=user.id,
            created_at=now,
            expires_at=now + timedelta(seconds=lifetime_seconds),
            last_used_at=now,
            user_agent=user_agent[:USER_AGENT_LENGTH],
        )
    )
    user.last_seen_at = now  # signing in is being seen
    db.session.commit()
    return f"{lookup_id}-{secret}"


def _find(credential: str) -> BrowserSession | None:
    parts = split_credential(credential)
    if parts is None:
        return None
    lookup_id, secret = parts
    # One query for session and user: this runs on every page.
    found: BrowserSession | None = db.session.scalar(
        select(BrowserSession).options(joinedload(BrowserSession.user)).where(BrowserSession.lookup_id == lookup_id)
    )
    if found is None or not hmac.compare_digest(found.secret_hash, hash_secret(secret)):
        return None
    return found


def resolve_browser_session(credential: str) -> BrowserSession | None:
    """The live session behind a cookie's credential: None when it is unknown, ended, expired or its user suspended."""
    found = _find(credential)
    now = utcnow()
    if found is None or found.expires_at <= now or found.user.status != STATUS_ACTIVE:
        return None
    record_use(found, now)
    return found


def end_browser_session(credential: str) -> None:
    """Sign out the browser holding this credential (nothing happens for an unknown or ended one)."""
    found = _find(credential)
    if found is not None:
        db.session.delete(found)
        db.session.commit()


def end_browser_session_of(user: User, session_id: str) -> None:
    """Sign out one of ``user``'s own browsers, chosen on the Account page."""
    found = db.session.scalar(
        select(BrowserSession).where(BrowserSession.id == session_id, BrowserSession.user_id == user.id)
    )
    if found is None:
        raise NotFound("No such session: it may have ended already.")
    db.session.delete(found)
    db.session.commit()


def delete_browser_sessions(user: User) -> None:
    """Delete every browser session of ``user``; the caller commits (with whatever else ends with them)."""
    db.session.execute(delete(BrowserSession).where(BrowserSession.user_id == user.id))


def browser_sessions_query(user: User) -> Select[BrowserSession]:
    """The user's live browser sessions, newest first."""
    return (
        select(BrowserSession)
        .where(BrowserSession.user_id == user.id, BrowserSession.expires_at > utcnow())
        .order_by(BrowserSession.created_at.desc(), BrowserSession.id)
    )
