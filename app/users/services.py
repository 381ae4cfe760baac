"""Accounts: creation, sign-in checks, roles and suspension. Plain values in, rows or domain errors out."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, func, select
from sqlalchemy.exc import IntegrityError
from werkzeug.security import check_password_hash, generate_password_hash

from app.auth.browser_sessions import delete_browser_sessions
from app.auth.models import KIND_SESSION, ApiKey
from app.columns import utcnow
from app.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthorized
from app.extensions import db
from app.users.models import (
    ASSIGNABLE_ROLES,
    ROLE_MEMBER,
    ROLE_OWNER,
    STATUS_ACTIVE,
    STATUS_SUSPENDED,
    User,
)
from app.validation import FieldErrors, check_email, check_password, check_username

# Checked against when the email is unknown, so a wrong email costs the same time as a wrong password.
_DUMMY_HASH = generate_password_hash("slipway-timing-equaliser")
BAD_CREDENTIALS = "Incorrect email or password."


def user_count() -> int:
    return db.session.scalar(select(func.count()).select_from(User)) or 0


def normalise_roles(roles: Iterable[str]) -> list[str]:
    wanted = set(roles) - {ROLE_MEMBER}
    unknown = wanted - set(ASSIGNABLE_ROLES)
    if unknown:
        raise InvalidInput(
            "Unknown role.",
            validations=[{"field": "roles", "detail": f"Unknown role(s): {', '.join(sorted(unknown))}."}],
        )
    return [role for role in ASSIGNABLE_ROLES if role in wanted]


def create_user(username: str, email: str, password: str, roles: Iterable[str] = ()) -> User:
    username, email = username.strip(), email.strip().lower()
    errors = FieldErrors()
    check_username(errors, username)
    check_email(errors, email)
    check_password(errors, password)
    errors.raise_if_any()
    role_list = normalise_roles(roles)
    _refuse_taken(username, email)
    user = User(username=username, email=email, password_hash=generate_password_hash(password), roles=role_list)
    db.session.add(user)
    try:
        db.session.commit()
    except IntegrityError as exc:  # a concurrent request took the name between our check and insert
        db.session.rollback()
        raise Conflict("That username or email is already in use.") from exc
    return user


def create_first_user(username: str, email: str, password: str) -> User:
    if user_count() > 0:
        raise Conflict("The first user has already been created. Sign in instead.")
    return create_user(username, email, password, roles=[ROLE_OWNER])


def _refuse_taken(username: str, email: str) -> None:
    errors = []
    if db.session.scalar(select(User.id).where(func.lower(User.username) == username.lower())):
        errors.append({"field": "username", "detail": "This username is taken."})
    if db.session.scalar(select(User.id).where(User.email == email)):
        errors.append({"field": "email", "detail": "This email is already in use."})
    if errors:
        raise Conflict("That username or email is already in use.", validations=errors)


def authenticate(email: str, password: str) -> User:
    """The active user with this email and password, or :class:`Unauthorized` that never says which part failed."""
    user: User | None = db.session.scalar(select(User).where(User.email == email.strip().lower()))
    if user is None or user.password_hash is None:
        check_password_hash(_DUMMY_HASH, password)
        raise Unauthorized(BAD_CREDENTIALS)
    if not check_password_hash(user.password_hash, password):
        raise Unauthorized(BAD_CREDENTIALS)
    if user.status != STATUS_ACTIVE:
        raise Unauthorized("This account is suspended. Ask an owner to reactivate it.")
    return user


def list_users() -> list[User]:
    return list(db.session.scalars(select(User).order_by(User.username)))


def get_user(user_id: str) -> User:
    user = db.session.get(User, user_id)
    if user is None:
        raise NotFound("No such user.")
    return user


def update_user(actor: User, user_id: str, *, roles: list[str] | None = None, status: str | None = None) -> User:
    """Change roles and/or status; an owner cannot lock themselves out of owning the deployment."""
    user = get_user(user_id)
    if roles is not None:
        new_roles = normalise_roles(roles)
        if user.id == actor.id and ROLE_OWNER not in new_roles:
            raise Forbidden("You cannot remove your own owner role; ask another owner.")
        user.roles = new_roles
    if status is not None:
        if status not in (STATUS_ACTIVE, STATUS_SUSPENDED):
            raise InvalidInput(
                "Unknown status.", validations=[{"field": "status", "detail": "Use active or suspended."}]
            )
        if user.id == actor.id and status == STATUS_SUSPENDED:
            raise Forbidden("You cannot suspend yourself.")
        if status == STATUS_SUSPENDED and user.status != STATUS_SUSPENDED:
            end_sessions(user)
        user.status = status
    user.updated_at = utcnow()
    db.session.commit()
    return user


def change_password(user: User, current_password: str, new_password: str) -> None:
    """Set a new password and end every session of the user (browser sessions and session tokens)."""
    if user.password_hash is None or not check_password_hash(user.password_hash, current_password):
        raise InvalidInput(
            "The current password is wrong.",
            validations=[{"field": "current_password", "detail": "The current password is wrong."}],
        )
    errors = FieldErrors()
    check_password(errors, new_password, field="new_password")
    errors.raise_if_any()
    user.password_hash = generate_password_hash(new_password)
    end_sessions(user)
    db.session.commit()


def end_sessions(user: User) -> None:
    """Delete every browser session and session token of the user; named API tokens stay. The caller commits."""
    delete_browser_sessions(user)
    db.session.execute(delete(ApiKey).where(ApiKey.user_id == user.id, ApiKey.kind == KIND_SESSION))


def sign_out_everywhere(user: User) -> None:
    """What "Sign out everywhere" does: the same as a password change, without changing the password."""
    end_sessions(user)
    db.session.commit()
