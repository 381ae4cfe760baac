"""Workspace pages: the list, the create form, a workspace with its builds, and a build with its log."""

from __future__ import annotations

from flask import current_app, flash, redirect, render_template, request, url_for
from markupsafe import Markup, escape
from werkzeug.wrappers import Response

from app.auth.access import page_user
from app.blueprints import page_blueprint
from app.catalog import services as catalog
from app.errors import DomainError
from app.provisioning.jobs import cancel_job, event_stream
from app.provisioning.log_html import log_page_context, page_stream
from app.provisioning.resources import job_resources
from app.provisioning.streams import follow_statuses, relay_for
from app.workspaces import services

bp = page_blueprint("workspaces", __name__)


@bp.get("/")
def home() -> Response:
    return redirect(url_for("workspaces.index"))


@bp.get("/workspaces")
def index() -> str:
    user = page_user()
    rows = [(workspace, services.latest_build(workspace)) for workspace in services.visible_workspaces(user)]
    return render_template("workspaces/index.html", rows=rows, status_of=services.build_status)


@bp.get("/workspaces/events")
def status_events() -> Response:
    """`refresh` when any workspace this user sees (or the one named by ?workspace=) changes status."""
    user = page_user()
    only = request.args.get("workspace")
    if only:
        services.get_workspace_for(user, only)

    def statuses() -> list[tuple[str, int, str]]:
        found = [w for w in services.visible_workspaces(user) if only is None or w.id == only]
        return [
            (w.id, build.build_number, services.build_status(build))
            for w in found
            for build in [services.latest_build(w)]
        ]

    return event_stream(follow_statuses(relay_for(current_app.config["SLIPWAY_SETTINGS"].redis_url), statuses))


@bp.route("/workspaces/new", methods=["GET", "POST"])
def new() -> str | Response | tuple[str, int]:
    template = catalog.get_template_by_name(request.values.get("template", ""))
    version = catalog.get_version(template.active_version_id) if template.active_version_id else None
    values = {key[6:]: value for key, value in request.form.items() if key.startswith("param.")}
    errors: dict[str, str] = {}
    if request.method == "POST":
        # An unchecked checkbox sends nothing: a bool parameter left unticked is "false".
        for parameter in version.parameters if version else []:
            if parameter.get("type") == "bool" and parameter["name"] not in values:
                values[parameter["name"]] = "false"
        try:
            workspace = services.create_workspace(page_user(), template.id, request.form.get("name", ""), values)
        except DomainError as error:
            errors = {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}
        else:
            build = services.latest_build(workspace)
            return redirect(url_for("workspaces.build", build_id=build.id))
    page = render_template(
        "workspaces/new.html",
        template=template,
        version=version,
        values=values,
        name=request.form.get("name", ""),
        errors=errors,
    )
    return (page, 400) if errors else page


@bp.get("/workspaces/<workspace_id>")
def show(workspace_id: str) -> str:
    user = page_user()
    workspace = services.get_workspace_for(user, workspace_id)
    builds = services.list_builds(workspace)
    latest = builds[0]
    return render_template(
        "workspaces/show.html",
        workspace=workspace,
        builds=builds,
        latest=latest,
        status=services.build_status(latest),
        resources=job_resources(latest.job_id),
        can_act=services.can_act(user, workspace),
        status_of=services.build_status,
    )


@bp.post("/workspaces/<workspace_id>/builds")
def transition(workspace_id: str) -> Response:
    user = page_user()
    workspace = services.get_workspace_for(user, workspace_id, need="act")
    try:
        build = services.create_build(user, workspace, request.form.get("transition", ""), {})
    except DomainError as error:
        flash(error.message + "".join(f" {item['field']}: {item['detail']}" for item in error.validations), "error")
        return redirect(url_for("workspaces.show", workspace_id=workspace.id))
    return redirect(url_for("workspaces.build", build_id=build.id))


@bp.get("/builds/<build_id>")
def build(build_id: str) -> str:
    found = services.get_build_for(page_user(), build_id)
    context = log_page_context(found.job)  # first: the status shown must not be newer than the lines
    return render_template("workspaces/build.html", build=found, status=services.build_status(found), **context)


@bp.get("/builds/<build_id>/log/stream")
def build_log_stream(build_id: str) -> Response:
    found = services.get_build_for(page_user(), build_id)
    transition = found.transition
    link = url_for("workspaces.show", workspace_id=found.workspace_id)
    follow_up = Markup(f' <a class="btn btn-small" href="{escape(link)}">Open workspace</a>')  # noqa: S704 - escaped
    return page_stream(
        found.job, lambda job: services.status_for(job.status, transition), job_status=False, follow_up=follow_up
    )


@bp.post("/builds/<build_id>/cancel")
def cancel(build_id: str) -> Response:
    user = page_user()
    found = services.get_build_for(user, build_id)
    if not (services.can_act(user, found.workspace) or user.is_template_admin):
        flash("Only the workspace's owner or an admin may cancel its builds.", "error")
    else:
        try:
            cancel_job(found.job)
            flash("Cancel requested.", "info")
        except DomainError as error:
            flash(error.message, "error")
    return redirect(url_for("workspaces.build", build_id=found.id))
