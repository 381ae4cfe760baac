"""Pages: the workspace page's lifecycle controls (update, schedule, extend, activate) and the update form that
asks for the parameter values a new template version needs."""

from __future__ import annotations

from datetime import timedelta

from flask import flash, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from app.auth.access import page_user, require_role
from app.auth.blueprints import page_blueprint
from app.catalog.services import get_template_by_name_for, get_version
from app.core.columns import rfc3339, utcnow
from app.core.errors import DomainError
from app.core.extensions import db
from app.core.schedule_words import FieldError, ScheduleForm
from app.core.schedules import WEEKDAYS, weekdays_from_mask
from app.lifecycle import settings
from app.notifications import delivery
from app.notifications.models import NotificationDelivery
from app.users.models import ROLE_OWNER, ROLE_TEMPLATE_ADMIN
from app.workspaces import schedule_rules, services, updates
from app.workspaces.models import Workspace
from app.workspaces.views import workspace_page
from protocol.codec import JSON
from protocol.values import parse_decimal

bp = page_blueprint("lifecycle", __name__)


def _workspace(workspace_id: str) -> Workspace:
    return services.get_workspace_for(page_user(), workspace_id, need="act")


def _back(workspace: Workspace) -> Response:
    return redirect(url_for("workspaces.show", workspace_id=workspace.id))


@bp.route("/workspaces/<workspace_id>/update", methods=["GET", "POST"])
def update(workspace_id: str) -> Response | str | tuple[str, int]:
    """Start the template's active version. When the new version needs values (a new required parameter, an
    option that was removed), the form asks for exactly those; nothing is built until they pass."""
    user, workspace = page_user(), _workspace(workspace_id)
    active_id = workspace.template.active_version_id
    if active_id is None:
        flash("The template has no active version.", "error")
        return _back(workspace)
    version = get_version(active_id)
    values = {key[len("param:") :]: value for key, value in request.form.items() if key.startswith("param:")}
    needed: dict[str, str] = {}
    if request.method == "POST":
        try:
            build = services.create_build(user, workspace, "start", values, active_id)
        except DomainError as error:
            needed = {item["field"]: item["detail"] for item in error.validations}
            if not needed:
                flash(error.message, "error")
                return _back(workspace)
        else:
            return redirect(url_for("workspaces.build", build_id=build.id))
    parameters = [parameter for parameter in version.parameters if parameter.name in needed] or [
        parameter for parameter in version.parameters if parameter.required
    ]
    labels = {item.name: (item.display_name or item.name, f"param-{item.name}") for item in parameters}
    page = render_template(
        "lifecycle/update.html", workspace=workspace, version=version, parameters=parameters, errors=needed,
        values=values, labels=labels,
    )  # fmt: skip
    # Asking for what the version needs is the form's first step, not an error; values that fail their rules are.
    return (page, 400) if needed and values else page


@bp.get("/templates/versions/<version_id>/promotion-check")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def promotion_check(version_id: str) -> str:
    """Next to "Make this the active version": what promoting it would leave outdated, and who must choose values."""
    return render_template("lifecycle/promotion_check.html", check=updates.promotion_check(get_version(version_id)))


@bp.post("/workspaces/<workspace_id>/schedule")
def schedule(workspace_id: str) -> Response | tuple[str, int]:
    """The schedule card's form. Every field is checked before anything is saved; a refused form is the page
    again with every edit kept, each wrong field named (and a 400, or the refusal's own status)."""
    workspace = _workspace(workspace_id)
    form = ScheduleForm.posted(request.form)
    errors: dict[str, str] = {}
    text: str | None = None
    try:
        text = form.checked()
    except FieldError as error:
        errors[error.field] = str(error)
    hours = request.form.get("ttl_hours", "").strip()
    try:
        ttl_ms = round(_hours(hours) * HOUR_MS) if hours else None
    except ValueError:
        errors["ttl_hours"] = "Give the autostop as a number of hours, e.g. 8 or 1.5."
    status = 400
    if not errors:
        try:
            # Applied together and committed once: a refusal of one (a template that sets the autostop) saves none.
            schedule_rules.apply_autostart(workspace, text)
            schedule_rules.apply_ttl(workspace, ttl_ms)
            updates_on = request.form.get("automatic_updates") == "on"
            schedule_rules.apply_automatic_updates(workspace, "always" if updates_on else "never")
            db.session.commit()
        except DomainError as error:
            db.session.rollback()
            fields = {"schedule": "cron" if form.cron.strip() else "start_time", "ttl_ms": "ttl_hours"}
            errors = {fields.get(item["field"], "_"): item["detail"] for item in error.validations} or {
                "_": error.message
            }
            status = error.status
        else:
            flash("Schedule saved.", "success")
            return _back(workspace)
    return workspace_page(page_user(), workspace, form, errors), status


@bp.post("/workspaces/<workspace_id>/extend")
def extend(workspace_id: str) -> Response:
    """The schedule card's + and − buttons: move the running workspace's stop by ``hours`` (negative: sooner; the
    API's rules hold: at least 30 minutes ahead, never past max_deadline)."""
    workspace = _workspace(workspace_id)
    try:
        hours = _hours(request.form.get("hours", "1"))
        build = services.latest_build(workspace)
        base = build.deadline or utcnow()
        if hours > 0:
            base = max(base, utcnow())
        settings.extend_deadline(workspace, rfc3339(base + timedelta(hours=hours)))
    except ValueError:
        flash("Extend by a number of hours.", "error")
    except DomainError as error:
        flash(error.message, "error")
    return _back(workspace)


def _hours(text: str) -> float:
    """A form's number of hours: a plain decimal within ten years either way (no NaN, infinities or 1e300, which
    overflow a timedelta), or ValueError."""
    hours = parse_decimal(text.strip())
    if abs(hours) > settings.DURATION_MAX_MS / HOUR_MS:
        raise ValueError(f"{text[:40]!r} hours is out of range")
    return hours


@bp.post("/workspaces/<workspace_id>/activate")
def activate(workspace_id: str) -> Response:
    user = page_user()
    workspace = services.get_workspace_for(
        user, workspace_id, need="read" if user.is_template_admin or user.is_auditor else "act"
    )
    settings.set_dormant(workspace, False)
    flash(f"{workspace.name} is active again: start it when you need it.", "success")
    return _back(workspace)


HOUR_MS, DAY_MS = 3_600_000, 24 * 3_600_000
# Settings-page fields in people's units: (form field, API field, milliseconds per unit).
_DURATION_FIELDS = (
    ("default_ttl_hours", "default_ttl_ms", HOUR_MS),
    ("activity_bump_minutes", "activity_bump_ms", 60_000),
    ("failure_ttl_hours", "failure_ttl_ms", HOUR_MS),
    ("dormancy_days", "time_til_dormant_ms", DAY_MS),
    ("autodelete_days", "time_til_dormant_autodelete_ms", DAY_MS),
)
_FLAG_FIELDS = ("allow_user_autostart", "allow_user_autostop", "require_active_version", "protect_persistent_resources")


@bp.route("/templates/<name>/settings", methods=["GET", "POST"])
def template_settings(name: str) -> Response | str | tuple[str, int]:
    """A template's name, description, icon, schedule and policy (the same checks as PATCH /api/v2/templates)."""
    template = get_template_by_name_for(page_user(), name, "admin")
    errors: dict[str, str] = {}
    if request.method == "POST":
        form = request.form
        body: dict[str, JSON] = {
            key: form.get(key, "") for key in ("display_name", "description", "icon", "deprecation_message")
        }
        for flag in _FLAG_FIELDS:
            body[flag] = form.get(flag) == "on"
        for field, api_field, unit in _DURATION_FIELDS:
            text = form.get(field, "").strip() or "0"
            try:
                body[api_field] = round(float(text) * unit)
            except ValueError:
                errors[api_field] = "Enter a number."
        weeks = form.get("requirement_weeks", "1").strip()
        days: list[JSON] = [day for day in WEEKDAYS if form.get(f"requirement_{day}") == "on"]
        body["autostop_requirement"] = {"days_of_week": days, "weeks": int(weeks) if weeks.isdecimal() else 0}
        body["max_port_share_level"] = form.get("max_port_share_level", "owner")
        for count in ("max_workspaces_per_person", "prebuild_budget"):
            text = form.get(count, "").strip() or "0"
            if text.isdecimal():
                body[count] = int(text)
            else:
                errors[count] = "Enter a whole number (0: no limit)."
        if not errors:
            try:
                settings.update_template(template, body)
            except DomainError as error:
                errors = {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}
            else:
                flash(f"Settings of {template.name} saved.", "success")
                return redirect(url_for("catalog.show", name=template.name))
        db.session.rollback()
    page = render_template(
        "lifecycle/template_settings.html", template=template, errors=errors, weekdays=WEEKDAYS,
        required_days=weekdays_from_mask(template.autostop_requirement_days), hour=HOUR_MS, day=DAY_MS,
    )  # fmt: skip
    return (page, 400) if errors else page


@bp.get("/workspaces/lifecycle")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def upcoming() -> str:
    """Admins: the workspaces that go dormant next, and the dormant ones deleted next; owners also see the
    notification deliveries that fail."""
    failing = delivery.failing_deliveries() if page_user().is_owner else []
    return render_template("lifecycle/upcoming.html", upcoming=settings.upcoming(), failing=failing)


@bp.post("/notifications/deliveries/<delivery_id>/retry")
@require_role(ROLE_OWNER)
def retry_delivery(delivery_id: str) -> Response:
    row = db.session.get(NotificationDelivery, delivery_id)
    if row is None:
        flash("No such delivery.", "error")
    else:
        delivery.retry(row)
        flash("The delivery will be tried again in a moment.", "success")
    return redirect(url_for("lifecycle.upcoming") + "#failing-deliveries")
