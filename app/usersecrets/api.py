"""README "Secrets": a person's own secrets (Coder's /users/{user}/secrets); values go in, never out."""

from __future__ import annotations

from flask import Response, jsonify

from app.auth.access import api_user
from app.auth.blueprints import api_blueprint
from app.core.errors import Forbidden
from app.core.pagination import PageRequest, with_total
from app.core.validation import FieldErrors, json_body, string_field
from app.users.models import User
from app.usersecrets import services
from app.usersecrets.services import SecretFields
from protocol.codec import JsonObject

bp = api_blueprint("usersecrets_api", __name__)


def _self(user: str) -> User:
    """The signed-in person when ``user`` names them (``me``, their id or username): nobody, owners included, reaches
    another person's secrets."""
    person = api_user()
    if user == "me" or user == person.id or user.lower() == person.username.lower():
        return person
    raise Forbidden("Only the person themselves can reach their secrets.")


def _fields(body: JsonObject, errors: FieldErrors, *, creating: bool) -> SecretFields:
    def optional(name: str) -> str | None:
        return string_field(body, name, errors, required=False) if name in body else None

    value = body.get("value")
    if value is not None and not isinstance(value, str):
        errors.add("value", "Must be a string.")
        value = None
    elif value is None and creating:
        value = ""
    fields = SecretFields(
        name=string_field(body, "name", errors) if creating else None,
        value=value if isinstance(value, str) else None,
        description=optional("description"),
        env_name=optional("env_name"),
        file_path=optional("file_path"),
    )
    services.check_fields(fields, errors, creating=creating)
    return fields


@bp.get("/users/<user>/secrets")
def list_secrets(user: str) -> Response:
    """A page of them by name (``?limit=``, ``?offset=``), with ``X-Total-Count``, like every list."""
    secrets, total = PageRequest.from_args().rows(services.secrets_query(_self(user)))
    return with_total(jsonify([services.secret_json(secret) for secret in secrets]), total)


@bp.post("/users/<user>/secrets")
def create_secret(user: str) -> tuple[Response, int]:
    person = _self(user)
    body, errors = json_body(), FieldErrors()
    fields = _fields(body, errors, creating=True)
    errors.raise_if_any()
    return jsonify(services.secret_json(services.create_secret(person, fields))), 201


@bp.get("/users/<user>/secrets/<name>")
def get_secret(user: str, name: str) -> Response:
    return jsonify(services.secret_json(services.get_secret(_self(user), name)))


@bp.patch("/users/<user>/secrets/<name>")
def update_secret(user: str, name: str) -> Response:
    person = _self(user)
    body, errors = json_body(), FieldErrors()
    fields = _fields(body, errors, creating=False)
    errors.raise_if_any()
    return jsonify(services.secret_json(services.update_secret(person, name, fields)))


@bp.delete("/users/<user>/secrets/<name>")
def delete_secret(user: str, name: str) -> tuple[str, int]:
    services.delete_secret(_self(user), name)
    return "", 204
