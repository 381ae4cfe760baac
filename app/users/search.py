"""Coder's user filter (``?q=``): ``status:active role:owner login_type:oidc name:ann``, a bare word matching a
username or email; and the orders the users list can be read in (``?sort=``). Shared by the API and the Users page.
"""

from __future__ import annotations

from sqlalchemy import ColumnElement, Select, String, cast, func, or_

from app.core.filters import Orders, one_of, ordered, parse_terms
from app.users.models import ALL_ROLES, ROLE_MEMBER, STATUS_ACTIVE, STATUS_SUSPENDED, User
from app.users.services import users_query

_EXAMPLES = {"status": "active", "role": "owner", "login_type": "oidc", "name": "ann"}
LOGIN_TYPES = ("password", "oidc")
# ?sort= → the columns; "-" reads it the other way (the newest first).
SORTS: Orders = {
    "username": (User.username, User.id),
    "-username": (User.username.desc(), User.id),
    "created": (User.created_at, User.id),
    "-created": (User.created_at.desc(), User.id),
    # Never seen counts as longest ago, on both databases (they put NULLs at different ends by default).
    "last_seen": (User.last_seen_at.asc().nulls_first(), User.id),
    "-last_seen": (User.last_seen_at.desc().nulls_last(), User.id),
}


def listed_users(text: str = "", sort: str = "") -> Select[User]:
    """Every user the filter ``text`` lets through, in the order ``sort`` names: the API's list and the page's."""
    return sorted_users(searched_users(users_query(), text), sort)


def searched_users(query: Select[User], text: str) -> Select[User]:
    """``query`` (of users) narrowed by the filter ``text`` says; all of it when ``text`` is blank."""
    if not text.strip():
        return query
    terms = parse_terms(text, _EXAMPLES)
    status = one_of(terms, "status", (STATUS_ACTIVE, STATUS_SUSPENDED))
    if status is not None:
        query = query.where(User.status == status)
    role = one_of(terms, "role", ALL_ROLES)
    if role is not None and role != ROLE_MEMBER:  # everyone is a member
        # Roles are a JSON list: its text holds the quoted name, on SQLite and PostgreSQL alike.
        query = query.where(cast(User.roles, String).contains(f'"{role}"'))
    login_type = one_of(terms, "login_type", LOGIN_TYPES)
    if login_type is not None:
        query = query.where(User.login_type == login_type)
    name = terms.get("name")
    if name is not None:
        query = query.where(named_like(name))
    return query


def named_like(text: str) -> ColumnElement[bool]:
    """People whose username or email contains ``text``, in any case (``%`` and ``_`` taken literally)."""
    part = text.lower()
    return or_(
        func.lower(User.username).contains(part, autoescape=True),
        func.lower(User.email).contains(part, autoescape=True),
    )


def sorted_users(query: Select[User], sort: str) -> Select[User]:
    """``query`` in the order ``sort`` names (by username when blank); an unknown one is a 400 listing them."""
    return ordered(query, sort, SORTS, "username")
