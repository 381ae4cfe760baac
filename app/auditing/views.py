"""The Audit page (owners and auditors): the API's filter, newest first, each diff drawn old → new."""

from __future__ import annotations

import json

from flask import Response, render_template, request

from app.audit import query
from app.auditing.api import export_response
from app.auth.access import require_role
from app.auth.blueprints import page_blueprint
from app.core.errors import InvalidInput
from app.core.validation import query_int
from app.users.models import ROLE_OWNER

bp = page_blueprint("audit", __name__)
PAGE_SIZE = 50


def _diff_rows(diff: str) -> list[tuple[str, str, str, bool]]:
    """(field, old, new, secret) for the template, values as compact JSON."""
    fields = json.loads(diff)
    rows = []
    for name in sorted(fields):
        change = fields[name]
        if not isinstance(change, dict):
            continue
        secret = bool(change.get("secret"))
        rows.append((name, _shown(change.get("old")), _shown(change.get("new")), secret))
    return rows


def _shown(value: object) -> str:
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)


@bp.get("/audit")
@require_role(ROLE_OWNER)
def index() -> str | tuple[str, int]:
    search = request.args.get("q", "").strip()
    before = query_int("before", 0, minimum=0) or None
    try:
        found = query.page(query.parse_filter(search), limit=PAGE_SIZE, before=before)
    except InvalidInput as error:
        return render_template("audit/index.html", search=search, entries=[], error=error.message), 400
    entries = [(entry, _diff_rows(entry.diff)) for entry in found.entries]
    return render_template(
        "audit/index.html", search=search, entries=entries, next_before=found.next_before, before=before, error=None
    )


@bp.get("/audit/export.<fmt>")
@require_role(ROLE_OWNER)
def export(fmt: str) -> Response:
    return export_response(fmt)
