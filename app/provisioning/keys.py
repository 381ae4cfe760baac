"""Provisioner keys: credentials for external daemons that fix the daemons' tags (reference §3.3).

The secret is shown once at creation; only its SHA-256 is stored, and a presented key is found by that hash.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from sqlalchemy import Select, select

from app.core.errors import Conflict, InvalidInput, NotFound, Unauthorized
from app.core.extensions import db
from app.core.validation import FieldErrors
from app.provisioning.models import ProvisionerKey
from app.users.models import User
from protocol.tags import MAX_DAEMON_TAGS, RESERVED, TagError, normalise_tags

# The names the daemon list shows for daemons that did not use a key; a key may not pretend to be one of them.
BUILTIN_KEY_NAME, PSK_KEY_NAME, USER_KEY_NAME = "built-in", "psk", "user-auth"
RESERVED_KEY_NAMES = (BUILTIN_KEY_NAME, PSK_KEY_NAME, USER_KEY_NAME)
KEY_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]{0,63}$")
# secrets.token_urlsafe(32): 43 characters; anything else cannot be a key.
KEY_LENGTH = 43


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(creator: User, name: str, tags: dict[str, str]) -> tuple[ProvisionerKey, str]:
    errors = FieldErrors()
    name = name.strip()
    if not KEY_NAME_PATTERN.match(name):
        errors.add("name", "Use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit.")
    elif name.lower() in RESERVED_KEY_NAMES:
        errors.add("name", f"{name!r} is reserved.")
    try:
        normalised = normalise_tags(tags)  # org scope whatever was asked: a key is not a person
        if len([key for key in normalised if key not in RESERVED]) > MAX_DAEMON_TAGS:
            raise TagError(f"a key may carry at most {MAX_DAEMON_TAGS} tags besides scope and owner")
    except TagError as exc:
        errors.add("tags", str(exc))
        normalised = {}
    errors.raise_if_any("The provisioner key is invalid.")
    if db.session.scalar(select(ProvisionerKey.id).where(ProvisionerKey.name == name)):
        raise Conflict(f"A provisioner key named {name!r} already exists.")
    secret = secrets.token_urlsafe(32)
    key = ProvisionerKey(name=name, hashed_secret=_hash(secret), tags=normalised, created_by=creator.id)
    db.session.add(key)
    db.session.commit()
    return key, secret


def keys_query() -> Select[ProvisionerKey]:
    """Provisioner keys oldest first, then by id so that pages never overlap."""
    return select(ProvisionerKey).order_by(ProvisionerKey.created_at, ProvisionerKey.id)


def delete_key(name: str) -> None:
    if name.lower() in RESERVED_KEY_NAMES:
        raise InvalidInput(f"{name!r} is reserved and cannot be deleted.")
    key = db.session.scalar(select(ProvisionerKey).where(ProvisionerKey.name == name))
    if key is None:
        raise NotFound(f"No provisioner key named {name!r}.")
    db.session.delete(key)
    db.session.commit()


def resolve_key(secret: str) -> ProvisionerKey:
    secret = secret.strip()
    if len(secret) != KEY_LENGTH:
        raise Unauthorized("That is not a provisioner key.")
    key: ProvisionerKey | None = db.session.scalar(
        select(ProvisionerKey).where(ProvisionerKey.hashed_secret == _hash(secret))
    )
    if key is None or not hmac.compare_digest(key.hashed_secret, _hash(secret)):
        raise Unauthorized("The provisioner key is unknown or was deleted.")
    return key
