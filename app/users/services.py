"""Accounts: creation, sign-in checks, roles and suspension. Plain values in, rows or domain errors out."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from datetime import timedelta

from sqlalchemy import Select, delete, func, select
from sqlalchemy.exc import IntegrityError
from werkzeug.security import check_password_hash, generate_password_hash

from app.core.columns import utcnow
from app.core.errors import Conflict, Forbidden, InvalidInput, NotFound, Unauthorized
from app.core.extensions import db
from app.core.validation import FieldErrors, check_email, check_password, check_username, text_problem
from app.events.access import access_lost
from app.users.browser_sessions import delete_browser_sessions
from app.users.models import (
    ASSIGNABLE_ROLES,
    KIND_SESSION,
    ROLE_MEMBER,
    ROLE_OWNER,
    STATUS_ACTIVE,
    STATUS_SUSPENDED,
    SYSTEM_USER_IDS,
    ApiKey,
    User,
)


@functools.cache
def _dummy_hash() -> str:
    """Checked against when the email is unknown, so a wrong email costs the same time as a wrong password. Made at
    first use, not at import: hashing costs every web worker and the server ~100 ms of start-up otherwise."""
    return generate_password_hash("slipway-timing-equaliser")


BAD_CREDENTIALS = "Incorrect email or password."
# How long an owner's "Allow single sign-on linking" stays open: long enough to tell the person, short enough that
# a forgotten permission does not lie around for ever.
OIDC_LINK_WINDOW = timedelta(days=7)


def user_count() -> int:
    """How many people have accounts (system users such as ``prebuilds`` are not people)."""
    return db.session.scalar(select(func.count()).select_from(User).where(User.id.not_in(SYSTEM_USER_IDS))) or 0


def normalise_roles(roles: Iterable[str]) -> list[str]:
    wanted = set(roles) - {ROLE_MEMBER}
    unknown = wanted - set(ASSIGNABLE_ROLES)
    if unknown:
        raise InvalidInput(
            "Unknown role.",
            validations=[{"field": "roles", "detail": f"Unknown role(s): {', '.join(sorted(unknown))}."}],
        )
    return [role for role in ASSIGNABLE_ROLES if role in wanted]


def create_user(
    username: str,
    email: str,
    password: str,
    roles: Iterable[str] = (),
    *,
    must_change_password: bool = False,
    commit: bool = True,
) -> User:
    """A new account. ``must_change_password`` when an admin chose the password (the person picks their own at
    first sign-in); ``commit=False`` flushes only, for a caller that changes more in the same transaction."""
    username, email = username.strip(), email.strip().lower()
    errors = FieldErrors()
    check_username(errors, username)
    check_email(errors, email)
    check_password(errors, password)
    errors.raise_if_any()
    role_list = normalise_roles(roles)
    _refuse_taken(username, email)
    user = User(
        username=username,
        email=email,
        password_hash=generate_password_hash(password),
        roles=role_list,
        must_change_password=must_change_password,
    )
    db.session.add(user)
    try:
        db.session.commit() if commit else db.session.flush()
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


def find_by_login(identifier: str) -> User | None:
    """The person a sign-in names: by email when it has an @ (usernames never do), else by username."""
    identifier = identifier.strip()
    if text_problem(identifier):  # no account has such a name, and PostgreSQL would refuse to look
        return None
    if "@" in identifier:
        found: User | None = db.session.scalar(select(User).where(User.email == identifier.lower()))
    else:
        found = db.session.scalar(select(User).where(func.lower(User.username) == identifier.lower()))
    return found


def authenticate(identifier: str, password: str) -> User:
    """The active user with this username or email and password, or :class:`Unauthorized` that never says which
    part failed."""
    user = find_by_login(identifier)
    if user is None or user.password_hash is None:
        check_password_hash(_dummy_hash(), password)
        raise Unauthorized(BAD_CREDENTIALS)
    if not check_password_hash(user.password_hash, password):
        raise Unauthorized(BAD_CREDENTIALS)
    if user.status != STATUS_ACTIVE:
        raise Unauthorized("This account is suspended. Ask an owner to reactivate it.")
    return user


def users_query() -> Select[User]:
    """Every person by username (then id, so that pages never overlap): system users are nobody's to manage."""
    return select(User).where(User.id.not_in(SYSTEM_USER_IDS)).order_by(User.username, User.id)


def get_user(user_id: str) -> User:
    user = None if text_problem(user_id) else db.session.get(User, user_id)
    if user is None:
        raise NotFound("No such user.")
    return user


def get_user_by_reference(reference: str) -> User:
    """A person by id or username (as Coder's ``/users/{user}`` paths take them)."""
    if text_problem(reference):
        raise NotFound("No such user.")
    user = db.session.get(User, reference) or db.session.scalar(
        select(User).where(func.lower(User.username) == reference.lower())
    )
    if user is None:
        raise NotFound("No such user.")
    return user


def is_last_active_owner(user: User) -> bool:
    """Whether ``user`` is an active owner and no other active user is one (the deployment would have no owner)."""
    if ROLE_OWNER not in user.roles or user.status != STATUS_ACTIVE:
        return False
    # Roles are a JSON list, which SQLite and PostgreSQL query differently: compare them here instead.
    others = db.session.scalars(select(User.roles).where(User.id != user.id, User.status == STATUS_ACTIVE))
    return not any(ROLE_OWNER in (roles or []) for roles in others)


def _last_owner_error(user: User) -> Conflict:
    return Conflict(f"{user.username} is the last active owner: make another user an owner first.")


def check_user_update(
    actor: User, user: User, *, roles: list[str] | None = None, status: str | None = None
) -> list[str] | None:
    """Refuse what ``update_user`` would refuse, changing nothing (the dashboard asks before it changes a user);
    returns the roles as stored."""
    new_roles = None if roles is None else normalise_roles(roles)
    if status is not None and status not in (STATUS_ACTIVE, STATUS_SUSPENDED):
        raise InvalidInput("Unknown status.", validations=[{"field": "status", "detail": "Use active or suspended."}])
    if new_roles is not None and ROLE_OWNER not in new_roles:
        if user.id == actor.id:
            raise Forbidden("You cannot remove your own owner role; ask another owner.")
        if is_last_active_owner(user):
            raise _last_owner_error(user)
    if status == STATUS_SUSPENDED:
        if user.id == actor.id:
            raise Forbidden("You cannot suspend yourself.")
        if is_last_active_owner(user):
            raise _last_owner_error(user)
    return new_roles


def update_user(actor: User, user_id: str, *, roles: list[str] | None = None, status: str | None = None) -> User:
    """Change roles and/or status; nobody can leave the deployment without an active owner."""
    user = get_user(user_id)
    new_roles = check_user_update(actor, user, roles=roles, status=status)
    if new_roles is not None:
        user.roles = new_roles
    if status is not None:
        if status == STATUS_SUSPENDED and user.status != STATUS_SUSPENDED:
            end_sessions(user)
        user.status = status
    user.updated_at = utcnow()
    db.session.commit()
    if status == STATUS_SUSPENDED:
        access_lost(user_id=user.id)  # their open SSH sessions, terminals and apps end with their sign-ins
    return user


def allow_oidc_linking(user_id: str, allowed: bool) -> User:
    """Let the next single sign-on whose verified email matches link this account (or withdraw that permission).

    An owner vouches here that the provider's identity with this email is the same person, which is what a
    password confirmation proves otherwise.
    """
    user = get_user(user_id)
    if allowed and user.oidc_subject is not None:
        raise Conflict(f"{user.username} is already linked to a single sign-on identity.")
    user.oidc_link_allowed_until = utcnow() + OIDC_LINK_WINDOW if allowed else None
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
    set_password(user, new_password)
    db.session.commit()


def set_password(user: User, new_password: str, *, must_change: bool = False) -> None:
    """Store a new password and end every session of the user; the caller checked it and commits."""
    user.password_hash = generate_password_hash(new_password)
    user.must_change_password = must_change
    user.updated_at = utcnow()
    end_sessions(user)


def admin_set_password(actor: User, user: User, new_password: str) -> None:
    """An owner's or user admin's reset (Coder's ``PUT /users/{user}/password`` for someone else): the person is
    signed out everywhere and must choose their own password at next sign-in."""
    if ROLE_OWNER in user.roles and not actor.is_owner:
        # Otherwise a user admin could take over an owner's account.
        raise Forbidden("Only an owner may reset an owner's password.")
    errors = FieldErrors()
    check_password(errors, new_password)
    errors.raise_if_any()
    set_password(user, new_password, must_change=True)
    db.session.commit()


def end_sessions(user: User) -> None:
    """Delete every browser session and session token of the user; named API tokens stay. The caller commits."""
    delete_browser_sessions(user)
    db.session.execute(delete(ApiKey).where(ApiKey.user_id == user.id, ApiKey.kind == KIND_SESSION))


def sign_out_everywhere(user: User) -> None:
    """What "Sign out everywhere" does: the same as a password change, without changing the password."""
    end_sessions(user)
    db.session.commit()
