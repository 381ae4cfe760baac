"""The owner's Appearance page (a plain form over the same service as the API) and the banners' stylesheet."""

from __future__ import annotations

import re

from flask import Flask, flash, redirect, render_template, request, url_for
from flask_login import current_user
from werkzeug.datastructures import MultiDict
from werkzeug.wrappers import Response

from app.appearance import services
from app.auth.access import require_role
from app.auth.blueprints import page_blueprint
from app.core.errors import DomainError
from app.users.models import ROLE_OWNER
from protocol.codec import JsonObject

# The stylesheet is read before sign-in too: the sign-in page shows the service banner, as Coder's does.
bp = page_blueprint("appearance", __name__, public=("stylesheet",))

# <input type="datetime-local"> sends minutes without a zone; the form says the times are UTC.
LOCAL_MINUTE = re.compile(r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}$")


@bp.route("/deployment/appearance", methods=["GET", "POST"])
@require_role(ROLE_OWNER)
def page() -> str | tuple[str, int] | Response:
    if request.method == "GET":
        return render_template("appearance/settings.html", config=services.config(), errors=[])
    submitted = _from_form(request.form)
    try:
        services.update(submitted)
    except DomainError as error:
        # The form keeps every edit, with what is wrong listed above it.
        errors = error.validations or [{"field": "", "detail": error.message}]
        return render_template("appearance/settings.html", config=submitted, errors=errors), error.status
    flash("Saved the appearance settings.", "success")
    return redirect(url_for("appearance.page"))


@bp.get("/appearance.css")
def stylesheet() -> Response:
    response = Response(services.stylesheet(), mimetype="text/css")
    # Pages link it with ?v=<last change>, so a change is seen at once and an unchanged one is cached.
    response.headers["Cache-Control"] = "public, max-age=31536000, immutable" if request.args.get("v") else "no-cache"
    return response


def _from_form(form: MultiDict[str, str]) -> JsonObject:
    def rows(prefix: str, keys: tuple[str, ...]) -> list[dict[str, str]]:
        found: list[dict[str, str]] = []
        index = 0
        while any(f"{prefix}-{index}-{key}" in form for key in keys):
            found.append({key: form.get(f"{prefix}-{index}-{key}", "").strip() for key in keys})
            index += 1
        return found

    banners: list[JsonObject] = [
        {
            "enabled": row["enabled"] == "on",
            "message": row["message"],
            "background_color": row["color"],
            "starts_at": _utc(row["starts_at"]),
            "ends_at": _utc(row["ends_at"]),
        }
        for row in rows("announcement", ("enabled", "message", "color", "starts_at", "ends_at"))
        if row["message"] or row["enabled"] == "on"  # a blank row adds nothing; clearing a message removes it
    ]
    links: list[JsonObject] = [
        dict(row) for row in rows("link", ("name", "target", "icon")) if row["name"] or row["target"]
    ]
    return {
        "application_name": form.get("application_name", ""),
        "logo_url": form.get("logo_url", ""),
        "docs_url": form.get("docs_url", ""),
        "service_banner": {
            "enabled": form.get("service_enabled") == "on",
            "message": form.get("service_message", ""),
            "background_color": form.get("service_color", ""),
        },
        "announcement_banners": list(banners),
        "support_links": list(links),
    }


def _utc(value: str) -> str:
    return f"{value}:00Z" if LOCAL_MINUTE.match(value) else value


def init_app(app: Flask) -> None:
    @app.context_processor
    def appearance_context() -> dict[str, object]:
        # Lazily: pages that render no base template (fragments, errors before the database is up) pay nothing.
        return {"appearance": services.shown, "inbox_unread": _inbox_unread}


def _inbox_unread() -> int:
    user = current_user
    if not user.is_authenticated:
        return 0
    return services.inbox_unread(str(user.id))
