"""People's secrets: checked, stored encrypted, listed without their values, and handed to the owner's builds."""

from __future__ import annotations

import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Select, select
from sqlalchemy.exc import IntegrityError

from app.core.columns import rfc3339, utcnow
from app.core.errors import Conflict, InvalidInput, NotFound
from app.core.extensions import db
from app.core.validation import FieldErrors, text_problem
from app.users.models import User
from app.usersecrets.models import UserSecret
from protocol.codec import JsonObject
from protocol.resources import SecretRequirement
from protocol.usersecrets import SECRET_ENV_NAME, secret_env_variable, secret_file_variable

log = logging.getLogger(__name__)

# Coder's rule for a secret's name.
SECRET_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
MAX_VALUE_CHARS = 64 * 1024
# Every value reaches each build's environment (Linux allows 2 MiB in all) and its log masking, which the web worker
# pays for (issue 34, M2): a person keeps at most this many secrets, of at most this much in all.
MAX_SECRETS = 100
MAX_TOTAL_VALUE_BYTES = 256 * 1024
MAX_DESCRIPTION_CHARS = 1024
MAX_FILE_PATH_CHARS = 512  # an index entry must fit a page (PostgreSQL)


@dataclass(frozen=True)
class SecretFields:
    """What a person sends for a secret; None leaves a field as it is (an update), "" clears env or file."""

    name: str | None = None
    value: str | None = None
    description: str | None = None
    env_name: str | None = None
    file_path: str | None = None


def check_fields(fields: SecretFields, errors: FieldErrors, *, creating: bool) -> None:
    """Every problem of ``fields`` into ``errors`` (all at once, so a form marks each)."""
    # A NUL would reach Terraform's environment and fail every build of the person, stop and delete included (L5).
    unreadable = set()
    for name, text in vars(fields).items():
        problem = text_problem(text) if text else ""
        if problem:
            errors.add(name, problem)
            unreadable.add(name)
    if (fields.name is not None or creating) and "name" not in unreadable:
        if not SECRET_NAME.match(fields.name or ""):
            errors.add("name", "Use 1-64 letters, digits, hyphens and underscores.")
    if (fields.value is not None or creating) and "value" not in unreadable:
        if not fields.value:
            errors.add("value", "Enter the secret's value.")
        elif len(fields.value) > MAX_VALUE_CHARS:
            errors.add("value", f"Use at most {MAX_VALUE_CHARS // 1024} KiB.")
    if fields.description is not None and len(fields.description) > MAX_DESCRIPTION_CHARS:
        errors.add("description", f"Use at most {MAX_DESCRIPTION_CHARS} characters.")
    if fields.env_name and (len(fields.env_name) > 255 or not SECRET_ENV_NAME.match(fields.env_name)):
        if "env_name" not in unreadable:
            errors.add(
                "env_name", "Use a POSIX variable name: letters, digits and underscores, not starting with a digit."
            )
    if fields.file_path and (
        len(fields.file_path) > MAX_FILE_PATH_CHARS or not fields.file_path.startswith(("/", "~/"))
    ):
        errors.add("file_path", "Start the path with / or ~/.")


def secret_json(secret: UserSecret) -> JsonObject:
    """A secret as the API shows it: never its value."""
    return {
        "id": secret.id,
        "user_id": secret.user_id,
        "name": secret.name,
        "description": secret.description,
        "env_name": secret.env_name or "",
        "file_path": secret.file_path or "",
        "created_at": rfc3339(secret.created_at),
        "updated_at": rfc3339(secret.updated_at),
    }


def secrets_query(user: User) -> Select[UserSecret]:
    """The person's secrets by name (then id, so that pages never overlap)."""
    return select(UserSecret).where(UserSecret.user_id == user.id).order_by(UserSecret.name, UserSecret.id)


def list_secrets(user: User) -> list[UserSecret]:
    return list(db.session.scalars(secrets_query(user)))


def get_secret(user: User, name: str) -> UserSecret:
    secret = db.session.scalar(select(UserSecret).where(UserSecret.user_id == user.id, UserSecret.name == name))
    if secret is None:
        raise NotFound(f"You have no secret named {name!r}.")
    return secret


def create_secret(user: User, fields: SecretFields) -> UserSecret:
    """A new secret (``fields`` checked with :func:`check_fields` first); Conflict when it repeats a name, variable
    or file of another of the person's secrets."""
    secret = UserSecret(
        user_id=user.id,
        name=fields.name or "",
        value=fields.value or "",
        description=fields.description or "",
        env_name=fields.env_name or None,
        file_path=fields.file_path or None,
    )
    _check_against_others(user, secret)
    db.session.add(secret)
    _commit(user, secret)
    return secret


def update_secret(user: User, name: str, fields: SecretFields) -> UserSecret:
    secret = get_secret(user, name)
    if fields.value is not None:
        secret.value = fields.value
    if fields.description is not None:
        secret.description = fields.description
    if fields.env_name is not None:
        secret.env_name = fields.env_name or None
    if fields.file_path is not None:
        secret.file_path = fields.file_path or None
    _check_against_others(user, secret)
    secret.updated_at = utcnow()
    _commit(user, secret)
    return secret


def delete_secret(user: User, name: str) -> None:
    db.session.delete(get_secret(user, name))
    db.session.commit()


def _check_against_others(user: User, secret: UserSecret) -> None:
    """Unique names, variables and files; and room left under the caps (two saves at once may pass one together)."""
    with db.session.no_autoflush:  # the changed secret is not written before it is checked
        others = [other for other in list_secrets(user) if other.id != secret.id]
    if len(others) >= MAX_SECRETS:
        detail = f"You have {len(others)} secrets, the most one person can keep: delete one you no longer need."
        raise InvalidInput(detail, validations=[{"field": "name", "detail": detail}])
    total = len(secret.value.encode()) + sum(len(other.value.encode()) for other in others)
    if total > MAX_TOTAL_VALUE_BYTES:
        detail = (
            f"Your secrets would hold {total // 1024} KiB in all; at most {MAX_TOTAL_VALUE_BYTES // 1024} KiB are "
            "allowed: make this one shorter or delete one you no longer need."
        )
        raise InvalidInput(detail, validations=[{"field": "value", "detail": detail}])
    for other in others:
        if other.name == secret.name:
            raise Conflict(f"You already have a secret named {secret.name!r}.")
        if secret.env_name and other.env_name == secret.env_name:
            raise Conflict(f"Your secret {other.name!r} already provides the variable {secret.env_name}.")
        if secret.file_path and other.file_path == secret.file_path:
            raise Conflict(f"Your secret {other.name!r} already provides the file {secret.file_path}.")


def _commit(user: User, secret: UserSecret) -> None:
    try:
        db.session.commit()
    except IntegrityError:  # the same name, variable or file saved at the same moment
        db.session.rollback()
        raise Conflict(
            f"Another of your secrets was saved meanwhile with the same name, variable or file as {secret.name!r}."
        ) from None


def build_secret_env(owner_id: str, declared: Sequence[SecretRequirement] | None) -> dict[str, str]:
    """The variables the coder provider's ``data "coder_secret"`` reads, for a build of ``owner_id``'s workspace:
    only that person's secrets, and only those the build's template version declares (``declared``), so that a
    template cannot read the secrets it does not name from its environment. ``None`` is a version imported before
    declarations were recorded: all of them, as then. Made when the job is handed out, never stored with the job.

    A value no environment variable can carry (a NUL, stored before values were checked) is left out with a warning:
    with it, Terraform could not even start, and no build of the person's, stop and delete included, would run. A
    build that reads that secret fails saying the secret is missing, which the person can fix by setting it again."""
    envs = None if declared is None else {item.env for item in declared if item.env}
    files = None if declared is None else {item.file for item in declared if item.file}
    env = {}
    for secret in db.session.scalars(select(UserSecret).where(UserSecret.user_id == owner_id)):
        if text_problem(secret.value):
            log.warning(
                "secret %r of user %s is left out of the build: its value holds a NUL character (set it again)",
                secret.name,
                owner_id,
            )
            continue
        if secret.env_name and (envs is None or secret.env_name in envs):
            env[secret_env_variable(secret.env_name)] = secret.value
        if secret.file_path and (files is None or secret.file_path in files):
            env[secret_file_variable(secret.file_path)] = secret.value
    return env


def stored_values(owner_id: str) -> list[str]:
    """Every secret value of a person, for masking in their builds' logs."""
    return [
        value for value in db.session.scalars(select(UserSecret.value).where(UserSecret.user_id == owner_id)) if value
    ]
