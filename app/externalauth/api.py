"""API.md "Git providers (external auth)": a person's links and Git SSH key; admins see providers' health."""

from __future__ import annotations

from flask import Response, jsonify

from app.auth.access import api_user, require_role
from app.auth.blueprints import api_blueprint
from app.externalauth import services
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN

bp = api_blueprint("externalauth_api", __name__)


@bp.get("/external-auth")
def links() -> Response:
    return jsonify(services.link_statuses(api_user()))


@bp.get("/external-auth/providers")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def provider_overview() -> Response:
    return jsonify(services.provider_overview())


@bp.delete("/external-auth/<provider_id>")
def unlink(provider_id: str) -> tuple[str, int]:
    services.unlink(api_user(), provider_id)
    return "", 204


@bp.get("/users/me/gitsshkey")
def git_ssh_key() -> Response:
    return jsonify({"public_key": services.git_ssh_key(api_user()).public_key})


@bp.put("/users/me/gitsshkey")
def regenerate_git_ssh_key() -> Response:
    return jsonify({"public_key": services.git_ssh_key(api_user(), regenerate=True).public_key})
