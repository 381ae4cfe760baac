"""API.md "Users and tokens"."""

from __future__ import annotations

from flask import Response, current_app, jsonify, request

from app.accounts import mail
from app.audit.recorder import ACTION_LOGOUT, acting_as, record, user_actor
from app.auth import ratelimit
from app.auth.access import api_user, bearer_token, record_sign_in, require_role
from app.auth.blueprints import api_blueprint
from app.core.columns import rfc3339
from app.core.config import Settings
from app.core.errors import Forbidden, InvalidInput, NotFound
from app.core.extensions import db
from app.core.pagination import PageRequest, with_total
from app.core.validation import FieldErrors, json_body, string_field, whole_number_field
from app.users import invitations, services
from app.users.models import ROLE_OWNER, ROLE_USER_ADMIN
from app.users.search import listed_users
from app.users.tokens import (
    api_tokens_query,
    create_api_token,
    issue_session_token,
    revoke_api_token,
    revoke_session_token,
)

bp = api_blueprint("users_api", __name__, public=("first_user_exists", "create_first_user", "login"))


def _settings() -> Settings:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings


@bp.get("/users/first")
def first_user_exists() -> tuple[Response, int]:
    if services.user_count() == 0:
        raise NotFound("No user exists yet; create the first one.")
    return jsonify({"message": "The first user has been created."}), 200


@bp.post("/users/first")
def create_first_user() -> tuple[Response, int]:
    body, errors = json_body(), FieldErrors()
    username = string_field(body, "username", errors)
    email = string_field(body, "email", errors)
    password = string_field(body, "password", errors)
    errors.raise_if_any()
    user = services.create_first_user(username, email, password)
    return jsonify(user.to_json()), 201


@bp.post("/users/login")
def login() -> tuple[Response, int]:
    body, errors = json_body(), FieldErrors()
    email = string_field(body, "email", errors)
    password = string_field(body, "password", errors)
    errors.raise_if_any()
    settings = _settings()
    user = ratelimit.sign_in_with_password(settings, request.remote_addr or "unknown", email, password)
    record_sign_in(user, "password")
    with acting_as(user_actor(user)):  # the token is theirs, though no one was signed in when it was asked for
        token = issue_session_token(user, settings.session_duration)
    return jsonify({"session_token": token}), 201


@bp.post("/users/logout")
def logout() -> tuple[str, int]:
    token = bearer_token()
    if token:
        user = api_user()
        record("user", user.id, user.username, ACTION_LOGOUT, actor=user_actor(user))
        revoke_session_token(token)
        db.session.commit()
    return "", 204


@bp.get("/users/me")
def me() -> Response:
    return jsonify(api_user().to_json())


@bp.get("/users")
@require_role(ROLE_OWNER, ROLE_USER_ADMIN)
def list_users() -> Response:
    """``?q=`` Coder's user filter (status: role: login_type: and a name), ``?sort=`` username, created, last_seen
    (``-`` for the newest first)."""
    query = listed_users(request.args.get("q", ""), request.args.get("sort", ""))
    users, total = PageRequest.from_args(after_id=True).rows(query)
    return with_total(jsonify([user.to_json() for user in users]), total)


@bp.post("/users")
@require_role(ROLE_OWNER)
def create_user() -> tuple[Response, int]:
    body, errors = json_body(), FieldErrors()
    username = string_field(body, "username", errors)
    email = string_field(body, "email", errors)
    password = string_field(body, "password", errors)
    roles = _roles_field(body.get("roles", []), errors)
    must_change = body.get("must_change_password", False)
    if not isinstance(must_change, bool):
        errors.add("must_change_password", "Must be true or false.")
    errors.raise_if_any()
    user = services.create_user(username, email, password, roles or [], must_change_password=must_change is True)
    return jsonify(user.to_json()), 201


@bp.put("/users/<user_id>/password")
def change_password(user_id: str) -> tuple[str, int]:
    """Coder's UpdateUserPasswordRequest: one's own password with ``old_password``; an owner or user admin sets
    anyone else's without it, and that person must choose a new one at next sign-in."""
    body, errors = json_body(), FieldErrors()
    password = string_field(body, "password", errors)
    old_password = string_field(body, "old_password", errors, required=False)
    actor = api_user()
    if user_id in ("me", actor.id) or user_id.lower() == actor.username.lower():
        if not old_password:
            errors.add("old_password", "Give your current password to change it.")
        errors.raise_if_any()
        services.change_password(actor, old_password, password)
        return "", 204
    # Refused before the person is looked up, so that nobody else learns which usernames exist.
    if not actor.is_user_admin:
        raise Forbidden("Only owners and user admins may set another person's password.")
    if actor.must_change_password:
        raise Forbidden("Choose your own new password before you set anyone else's.")
    target = services.get_user_by_reference(user_id)
    errors.raise_if_any()
    services.admin_set_password(actor, target, password)
    return "", 204


@bp.post("/users/invitations")
@require_role(ROLE_OWNER, ROLE_USER_ADMIN)
def create_invitation() -> tuple[Response, int]:
    """Invite by email with roles: the link is answered when the server has no SMTP, else emailed (and not
    answered: only the person invited should hold it)."""
    body, errors = json_body(), FieldErrors()
    email = string_field(body, "email", errors)
    roles = _roles_field(body.get("roles", []), errors)
    errors.raise_if_any()
    settings, actor = _settings(), api_user()
    invitation, credential = invitations.invite(actor, email, roles or [])
    link = invitations.invitation_link(settings.access_url, credential)
    reply = invitation.to_json()
    if mail.email_configured(settings):
        mail.send_invitation(settings, invitation, actor, link)
        reply["emailed"] = True
    else:
        reply |= {"emailed": False, "link": link}
    return jsonify(reply), 201


@bp.get("/users/invitations")
@require_role(ROLE_OWNER, ROLE_USER_ADMIN)
def list_invitations() -> Response:
    """Pending invitations (expired ones too, until revoked), newest first."""
    rows, total = PageRequest.from_args().rows(invitations.pending_invitations_query())
    return with_total(jsonify([invitation.to_json() for invitation in rows]), total)


@bp.delete("/users/invitations/<invitation_id>")
@require_role(ROLE_OWNER, ROLE_USER_ADMIN)
def revoke_invitation(invitation_id: str) -> tuple[str, int]:
    invitations.revoke_invitation(invitation_id)
    return "", 204


@bp.get("/users/<user_id>")
@require_role(ROLE_OWNER, ROLE_USER_ADMIN)
def get_user(user_id: str) -> Response:
    """By id or username; owners and user admins (who manage groups of people)."""
    return jsonify(services.get_user_by_reference(user_id).to_json())


@bp.patch("/users/<user_id>")
@require_role(ROLE_OWNER)
def update_user(user_id: str) -> Response:
    body, errors = json_body(), FieldErrors()
    roles = _roles_field(body["roles"], errors) if "roles" in body else None
    status = string_field(body, "status", errors, required=False) or None
    errors.raise_if_any()
    if roles is None and status is None:
        raise InvalidInput("Nothing to change: send roles and/or status.")
    return jsonify(services.update_user(api_user(), user_id, roles=roles, status=status).to_json())


def _roles_field(value: object, errors: FieldErrors) -> list[str] | None:
    if not isinstance(value, list) or not all(isinstance(role, str) for role in value):
        errors.add("roles", "Must be a list of role names.")
        return None
    return value


@bp.post("/users/me/tokens")
def create_token() -> tuple[Response, int]:
    body, errors = json_body(), FieldErrors()
    name = string_field(body, "name", errors)
    lifetime = whole_number_field(body, "lifetime_seconds", errors)
    errors.raise_if_any()
    settings = _settings()
    key, secret = create_api_token(
        api_user(),
        name,
        lifetime,
        default=settings.default_token_lifetime,
        maximum=settings.max_token_lifetime,
    )
    return jsonify({"id": key.id, "name": key.name, "token": secret, "expires_at": rfc3339(key.expires_at)}), 201


@bp.get("/users/me/tokens")
def list_tokens() -> Response:
    tokens, total = PageRequest.from_args().rows(api_tokens_query(api_user()))
    return with_total(jsonify([key.to_json() for key in tokens]), total)


@bp.delete("/users/me/tokens/<token_id>")
def delete_token(token_id: str) -> tuple[str, int]:
    revoke_api_token(api_user(), token_id)
    return "", 204
