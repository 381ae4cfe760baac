"""The IdP sync admin page (owners): the default organisation's group and role sync, as the API sets them. Mappings
are written one per line, ``idp-value = name, name`` (group names here, where the API takes group ids)."""

from __future__ import annotations

from flask import flash, redirect, render_template, request, url_for
from sqlalchemy import select
from werkzeug.wrappers import Response

from app.auth.access import require_role
from app.auth.blueprints import page_blueprint
from app.core.errors import DomainError
from app.core.extensions import db
from app.groups import sync
from app.groups.models import Group
from app.organizations.models import DEFAULT_ORGANIZATION_ID, Organization
from app.organizations.services import get_organization
from app.users.models import ROLE_OWNER
from protocol.codec import JSON

bp = page_blueprint("idpsync", __name__)


def mapping_text(mapping: dict[str, list[str]], names: dict[str, str]) -> str:
    return "\n".join(f"{key} = {', '.join(names.get(item, item) for item in items)}" for key, items in mapping.items())


def parse_mapping(text: str, ids: dict[str, str]) -> dict[str, JSON]:
    """``idp = a, b`` lines to {idp: [a, b]}, names turned into ids where ``ids`` knows them (a name it does not
    know stays, and the service names it as unknown)."""
    mapping: dict[str, JSON] = {}
    for line in text.splitlines():
        key, equals, values = line.partition("=")
        if not line.strip():
            continue
        if not equals or not key.strip():
            raise DomainError(f"Write each mapping as `idp-value = name, name`, not {line.strip()!r}.")
        mapping[key.strip()] = [ids.get(value.strip(), value.strip()) for value in values.split(",") if value.strip()]
    return mapping


def _group_names(organization: Organization) -> dict[str, str]:
    rows = db.session.execute(select(Group.id, Group.name).where(Group.organization_id == organization.id))
    return {group_id: name for group_id, name in rows}


@bp.route("/admin/idp-sync", methods=["GET", "POST"])
@require_role(ROLE_OWNER)
def page() -> str | Response | tuple[str, int]:
    organization = get_organization(DEFAULT_ORGANIZATION_ID)
    names = _group_names(organization)
    status = 200
    if request.method == "POST":
        form = request.form
        try:
            if form.get("which") == "roles":
                body: dict[str, JSON] = {
                    "field": form.get("field", ""),
                    "mapping": parse_mapping(form.get("mapping", ""), {}),
                }
                sync.update_role_sync(organization, body)
            else:
                ids = {name: group_id for group_id, name in names.items()}
                body = {
                    "field": form.get("field", ""),
                    "mapping": parse_mapping(form.get("mapping", ""), ids),
                    "regex_filter": form.get("regex_filter", "").strip() or None,
                    "auto_create_missing_groups": form.get("auto_create_missing_groups") == "on",
                }
                sync.update_group_sync(organization, body)
        except DomainError as error:
            db.session.rollback()
            flash(error.message + "".join(f" {item['field']}: {item['detail']}" for item in error.validations), "error")
            status = 400
        else:
            flash("Saved: it applies at each person's next sign-in.", "success")
            return redirect(url_for("idpsync.page"))
    groups, roles = sync.group_sync_of(organization), sync.role_sync_of(organization)
    page_html = render_template(
        "users/idpsync.html",
        groups=groups,
        roles=roles,
        group_mapping=mapping_text(groups.mapping, names),
        role_mapping=mapping_text(roles.mapping, {}),
    )
    return page_html, status
