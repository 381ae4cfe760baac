"""The template page's Prebuilt workspaces card (owners and the template's admins) and the dashboard's pause
switch."""

from __future__ import annotations

from flask import flash, redirect, render_template, request
from markupsafe import Markup
from werkzeug.wrappers import Response

from app.auth.access import require_role
from app.auth.blueprints import page_blueprint
from app.catalog import access as template_access
from app.catalog.models import Template
from app.prebuilds import services
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN, User

bp = page_blueprint("prebuilds", __name__)


def prebuilds_section(template: Template, viewer: User) -> Markup:
    """Each pool of the template (preset, desired, running, ready, failing and why), for those who administer it;
    nothing when it has no pool."""
    if not (viewer.is_template_admin or template_access.may(viewer, template, "admin")):
        return Markup("")
    pools = services.pools(template.id)
    if not pools:
        return Markup("")
    html = render_template(
        "prebuilds/_section.html",
        template=template,
        pools=pools,
        paused=services.is_paused(),
        may_pause=viewer.is_template_admin,
    )
    return Markup(html)  # noqa: S704 - the template's own output, escaped there


@bp.post("/deployment/prebuilds/settings")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def update_settings() -> Response:
    paused = request.form.get("reconciliation_paused") == "true"
    services.update_settings({"reconciliation_paused": paused})
    flash("Prebuilds reconciliation paused." if paused else "Prebuilds reconciliation resumed.", "success")
    back = request.form.get("next", "")
    return redirect(back if back.startswith("/templates/") else "/templates")
