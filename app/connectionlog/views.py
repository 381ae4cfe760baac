"""The Connection log page: the same filter as the API, one page at a time."""

from __future__ import annotations

from flask import render_template, request

from app.auth.access import require_role
from app.auth.blueprints import page_blueprint
from app.connectionlog.models import REASONS, TYPES
from app.connectionlog.search import log_query
from app.core.errors import InvalidInput
from app.core.pagination import Page, page_of, requested_page
from app.users.models import ROLE_AUDITOR, ROLE_OWNER

bp = page_blueprint("connectionlog", __name__)

TYPE_NAMES = {
    "ssh": "SSH",
    "reconnecting_pty": "Terminal",
    "port_forwarding": "Port forward",
    "workspace_app": "App",
}
REASON_NAMES = {
    "closed": "Closed",
    "timed_out": "Timed out",
    "workspace_stopped": "Workspace stopped",
    "access_removed": "Access removed",
    "lost": "Lost (its server stopped)",
}
assert set(TYPE_NAMES) == set(TYPES) and set(REASON_NAMES) == set(REASONS)  # noqa: S101 - a name for each


@bp.get("/connectionlog")
@require_role(ROLE_OWNER, ROLE_AUDITOR)
def index() -> tuple[str, int] | str:
    text = request.args.get("q", "")
    try:
        # Counted ten pages ahead at most ("1–25 of more than 250"): a year of connections is millions of rows.
        page = page_of(log_query(text), requested_page(), pages_ahead=10)
        error = ""
    except InvalidInput as exc:
        page, error = Page.empty(), exc.message
    body = render_template(
        "connectionlog/index.html",
        page=page,
        q=text,
        error=error,
        type_names=TYPE_NAMES,
        reason_names=REASON_NAMES,
    )
    return (body, 400) if error else body
