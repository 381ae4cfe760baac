"""The template page's Workspaces card (a section the catalog renders: app/catalog/page_sections.py), and what
its admins do from it to the outdated ones: Update all (asked first) and Notify owners."""

from __future__ import annotations

from flask import flash, redirect, render_template, url_for
from markupsafe import Markup
from werkzeug.wrappers import Response

from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.catalog import access as template_access
from app.catalog import services as catalog
from app.catalog.models import Template
from app.core.errors import InvalidInput
from app.core.pagination import page_of, requested_page
from app.users.models import User
from app.workspaces import updates
from app.workspaces.services import build_status, latest_builds

bp = page_blueprint("template_workspaces", __name__)
PAGE_PARAM = "workspaces_page"


def workspaces_section(template: Template, viewer: User) -> Markup:
    """The workspaces of the template that ``viewer`` may see, a page at a time, with how many are on each
    version; its admins get Update all and Notify owners when some are outdated."""
    page = page_of(updates.template_workspaces_query(viewer, template), requested_page(PAGE_PARAM), param=PAGE_PARAM)
    latest = latest_builds(page.rows)
    may_admin = template_access.may(viewer, template, "admin")
    counts = updates.version_counts(viewer, template)
    html = render_template(
        "catalog/_partials/workspaces.html",
        template=template,
        page=page,
        rows=[(workspace, latest[workspace.id]) for workspace in page.rows if workspace.id in latest],
        counts=counts,
        outdated=sum(item.count for item in counts if not item.active) if template.active_version_id else 0,
        may_admin=may_admin,
        status_of=build_status,
    )
    return Markup(html)  # noqa: S704 - the template's own output, escaped there


def _administered(name: str) -> Template:
    template = catalog.get_template_by_name_for(page_user(), name, "admin")
    if template.active_version_id is None:
        raise InvalidInput(f"Template {name} has no active version to update to.")
    return template


@bp.get("/templates/<name>/update-all")
def confirm_update_all(name: str) -> str:
    """Asks first: which outdated workspaces would be updated, and which skipped and why."""
    template = _administered(name)
    plan = updates.plan_update_all(page_user(), template)
    active = catalog.get_version(str(template.active_version_id))
    return render_template("catalog/update_all.html", template=template, active=active, outcomes=plan, done=False)


@bp.post("/templates/<name>/update-all")
def update_all(name: str) -> str:
    template = _administered(name)
    outcomes = updates.update_all(page_user(), template)
    active = catalog.get_version(str(template.active_version_id))
    return render_template("catalog/update_all.html", template=template, active=active, outcomes=outcomes, done=True)


@bp.post("/templates/<name>/notify-outdated")
def notify_outdated(name: str) -> Response:
    """Each owner of an outdated workspace is told once per workspace and active version: a repeat tells only the
    owners of workspaces outdated since (or of a newer active version)."""
    template = _administered(name)
    active = catalog.get_version(str(template.active_version_id))
    result = updates.notify_outdated_owners(template, active.name)
    if result.notified:
        flash(f"Notified the owners of {len(result.notified)}: {', '.join(result.notified)}.", "success")
    if result.unchanged:
        flash(
            f"Not notified again: {', '.join(result.unchanged)} (already told about {active.name}, or its owner "
            "turned these notifications off).",
            "info",
        )
    if not result.notified and not result.unchanged:
        flash(f"No workspace of {template.name} is outdated.", "info")
    return redirect(url_for("catalog.show", name=template.name))
