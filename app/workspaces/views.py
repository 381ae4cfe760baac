"""Workspace pages: the list, the create form, a workspace with its builds, and a build with its log."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from functools import partial

from flask import flash, redirect, render_template, request, url_for
from markupsafe import Markup, escape
from sqlalchemy import Select
from werkzeug.wrappers import Response

from app.auth.access import page_user
from app.auth.blueprints import page_blueprint
from app.catalog import services as catalog
from app.catalog.models import TemplateVersion
from app.catalog.presets import PRESET_FIELD, default_preset, find_preset, preset_id
from app.core.errors import DomainError, InvalidInput
from app.core.extensions import db
from app.core.pagination import Page, page_of, requested_position
from app.core.schedule_words import PICKER_DAYS, ScheduleForm, zone_groups
from app.events import get_relay
from app.events.sse import event_stream
from app.events.streams import follow_changes, follow_statuses, seen_token
from app.externalauth import services as external_auth
from app.provisioning.failures import failure_cause, failure_causes
from app.provisioning.jobs import cancel_job
from app.provisioning.log_html import FailureHints, log_page_context, page_stream, retry_from_form
from app.provisioning.models import FAILED
from app.provisioning.overview import daemons_serving
from app.provisioning.sections import job_sections
from app.resources.services import job_resources
from app.users.models import User
from app.workspaces import failure_hints, quotas, services, sharing, sharing_views
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.parameters import field_labels, form_parameters, form_values, shown_parameters
from app.workspaces.search import searched, sorted_workspaces
from app.workspaces.sections import workspace_sections
from protocol.logs import FailureCause
from protocol.provisionerd import NameValue, Preset

bp = page_blueprint("workspaces", __name__)


@bp.get("/")
def home() -> Response:
    return redirect(url_for("workspaces.index"))


@bp.get("/workspaces")
def index() -> str | tuple[str, int]:
    """The workspaces the user may see, a page at a time, narrowed by the search box (``?q=``, Coder's filter) and
    in the order its column headers set (``?sort=``)."""
    search, sort = request.args.get("q", "").strip(), request.args.get("sort", "")
    try:
        query = _listed(page_user(), search, sort)
    except InvalidInput as error:  # the box keeps what was typed, with what is wrong with it
        page = Page.empty()
        context = {
            "rows": [],
            "failures": {},
            "page": page,
            "search": search,
            "search_error": error.message,
            "sort": sort or "name",
            "stream_seen": "",
        }
        return render_template("workspaces/index.html", status_of=services.build_status, **context), 400
    page = page_of(query, requested_position(), pages_ahead=_pages_counted(search))
    latest = services.latest_builds(page.rows)
    rows = [(workspace, latest[workspace.id]) for workspace in page.rows]
    seen = seen_token({"refresh": _list_state(rows)})
    return render_template(
        "workspaces/index.html",
        rows=rows,
        failures=failure_causes([build.job for _, build in rows]),
        page=page,
        search=search,
        search_error="",
        sort=sort or "name",
        status_of=services.build_status,
        stream_seen=seen,
        quota=_own_quota(),
    )


def _own_quota() -> quotas.Quota | None:
    """The signed-in person's use and budget, shown above their workspaces while quotas are on."""
    quota = quotas.quota_of(page_user())
    return quota if quota.enabled else None


PAGES_COUNTED_AHEAD = 10


def _pages_counted(search: str) -> int | None:
    """A filtered list is counted ten pages ahead, not to its end: ``status:`` tests each workspace's latest build
    (at 10,000 workspaces, 90 ms to count them all, on every page and every live refresh)."""
    return PAGES_COUNTED_AHEAD if search else None


def _listed(user: User, search: str, sort: str) -> Select[Workspace]:
    return sorted_workspaces(searched(services.visible_workspaces_query(user), search, user), sort)


def _list_state(rows: Sequence[tuple[Workspace, WorkspaceBuild]]) -> list[tuple[str, int, str]]:
    """What the list's stream compares: each workspace's latest build and its status."""
    return [(workspace.id, build.build_number, services.build_status(build)) for workspace, build in rows]


# A workspace's page also re-checks its sections this often: an agent going from connected to disconnected or
# timeout follows from time passing, and sends no notice.
SECTION_POLL_SECONDS = 2.0


@bp.get("/workspaces/events")
def status_events() -> Response:
    """`refresh` when a workspace on the list's page (?page=) or the one named by ?workspace= changes status; for
    one workspace also each section's event (`agents`) when what it shows changes."""
    user = page_user()
    only = request.args.get("workspace")
    seen = request.args.get("seen")
    if only:
        return _workspace_events(services.get_workspace_for(user, only).id, seen)
    position, search = requested_position(), request.args.get("q", "").strip()
    listed = _listed(user, search, request.args.get("sort", ""))

    def statuses() -> list[tuple[str, int, str]]:
        workspaces = page_of(listed, position, pages_ahead=_pages_counted(search)).rows
        latest = services.latest_builds(workspaces)
        return _list_state([(workspace, latest[workspace.id]) for workspace in workspaces])

    return event_stream(follow_statuses(get_relay(), statuses, seen=seen))


def _workspace_readers(workspace_id: str) -> dict[str, Callable[[], object]]:
    """What a workspace page's stream compares, by event: its latest build's status and each section's state."""

    def build_state() -> tuple[int, str] | None:
        workspace = db.session.get(Workspace, workspace_id)
        if workspace is None:
            return None
        build = services.latest_build(workspace)
        return build.build_number, services.build_status(build)

    readers: dict[str, Callable[[], object]] = {"refresh": build_state}
    readers.update({section.event: partial(section.live_state, workspace_id) for section in workspace_sections()})
    return readers


def _workspace_events(workspace_id: str, seen: str | None) -> Response:
    sections = workspace_sections()

    def watch_keys(shown: Mapping[str, object]) -> list[str]:
        return [key for section in sections for key in section.watch_keys(shown[section.event])]

    stream = follow_changes(
        get_relay(), _workspace_readers(workspace_id), keys=watch_keys, poll_seconds=SECTION_POLL_SECONDS, seen=seen
    )
    return event_stream(stream)


@bp.route("/workspaces/new", methods=["GET", "POST"])
def new() -> str | Response | tuple[str, int]:
    template = catalog.get_template_by_name_for(page_user(), request.values.get("template", ""))
    version = catalog.get_version(template.active_version_id) if template.active_version_id else None
    parameters = form_parameters(version.parameters) if version else []
    values: dict[str, str] = {}
    errors: dict[str, str] = {}
    status = 200
    # The preset the form shows chosen: the one submitted (empty: none), else the version's default.
    chosen_preset = _form_preset(version)
    if template.deprecation_message:  # the page says why instead of a form; a POST is still refused by the service
        status = 403 if request.method == "POST" else 200
    if request.method == "POST":
        values = form_values(parameters, request.form, [parameter.name for parameter in parameters])
        try:
            workspace = services.create_workspace(
                page_user(), template.id, request.form.get("name", ""), values, preset_id=chosen_preset or None
            )
        except DomainError as error:
            errors = {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}
            status = error.status
        else:
            build = services.latest_build(workspace)
            return redirect(url_for("workspaces.build", build_id=build.id))
    needs = external_auth.needs_status(page_user(), version.external_auth) if version else []
    # What the error summary calls each field, and where it links to.
    labels = {"name": ("Workspace name", "workspace-name")}
    labels.update({f"external_auth.{need['id']}": (str(need["display_name"]), "external-auth") for need in needs})
    labels.update(field_labels(parameters))
    chosen = find_preset(version, chosen_preset) if version and chosen_preset else None
    page = render_template(
        "workspaces/new.html",
        template=template,
        version=version,
        parameters=parameters,
        values=values,
        name=request.form.get("name", ""),
        errors=errors,
        labels=labels,
        external_auth=needs,
        presets=_preset_choices(version) if version else [],
        chosen_preset=chosen_preset,
        chosen_preset_name=chosen.name if chosen else "",
        preset_values={item.name: item.value for item in chosen.parameters} if chosen else {},
        preset_error=errors.get(PRESET_FIELD, ""),
    )
    return page, status


def _preset_choices(version: TemplateVersion) -> list[tuple[str, Preset, dict[str, str]]]:
    """Each preset as the form offers it: its id, itself, and the values it sets (for the script that shows them)."""
    return [
        (preset_id(version.id, preset.name), preset, {item.name: item.value for item in preset.parameters})
        for preset in version.presets
    ]


def _form_preset(version: TemplateVersion | None) -> str:
    if version is None:
        return ""
    if request.method == "POST":
        return request.form.get("preset", "")
    preset = default_preset(version)
    return preset_id(version.id, preset.name) if preset else ""


@bp.get("/workspaces/new/routing")
def new_routing() -> str:
    """Where builds with the parameters chosen so far would go (templates whose coder_workspace_tags use them):
    said on the create form before anything is submitted."""
    user = page_user()
    template = catalog.get_template_by_name_for(user, request.args.get("template", ""))
    version = catalog.get_version(template.active_version_id) if template.active_version_id else None
    if version is None or not version.workspace_tags:
        return ""
    chosen = {key[6:]: value for key, value in request.args.items() if key.startswith("param.")}
    values = [NameValue(name=p.name, value=chosen.get(p.name, p.default_value)) for p in version.parameters]
    try:
        tags = services.build_tags(version, user.id, values)
    except DomainError as error:
        return render_template("workspaces/_partials/routing.html", problem=error.message, tags={}, online=0)
    serving = daemons_serving(tags, user.id, organization_id=version.job.organization_id)
    online = sum(1 for view in serving if view.status != "offline")
    return render_template("workspaces/_partials/routing.html", problem="", tags=tags, online=online)


@bp.get("/workspaces/<workspace_id>")
def show(workspace_id: str) -> str:
    user = page_user()
    return workspace_page(user, services.get_workspace_for(user, workspace_id))


def workspace_page(
    user: User, workspace: Workspace, schedule_form: ScheduleForm | None = None,
    schedule_errors: Mapping[str, str] | None = None,
) -> str:  # fmt: skip
    """The workspace page; a refused schedule form shows again as it was sent, with its errors."""
    # Read before the page: a change while it renders makes the stream refresh it rather than be missed.
    seen = seen_token({name: read() for name, read in _workspace_readers(workspace.id).items()})
    latest = services.latest_build(workspace)
    timeline = page_of(services.timeline_query(workspace), requested_position())
    resources = job_resources(latest.job_id)
    sections = [section.render(workspace, user) for section in workspace_sections()]
    active = workspace.template.active_version_id
    return render_template(
        "workspaces/show.html",
        active_version=db.session.get(TemplateVersion, active) if active else None,
        schedule_form=schedule_form or ScheduleForm.of(workspace.autostart_schedule),
        schedule_ttl=_ttl_hours(workspace) if schedule_form is None else request.form.get("ttl_hours", ""),
        schedule_errors=schedule_errors or {},
        zones=zone_groups(),
        picker_days=PICKER_DAYS,
        workspace=workspace,
        timeline=timeline,
        latest=latest,
        parameters=shown_parameters(latest.template_version.parameters, latest.parameters),
        status=services.build_status(latest),
        failure=failure_hints.explain(latest, failure_cause(latest.job)),
        retry_url=_retry_url(user, latest),
        change_parameters_url=_change_parameters_url(user, latest),
        resources=resources,
        sections=sections,
        can_act=services.can_act(user, workspace),
        can_use=services.can_use(user, workspace),
        # Start and stop: also the template's own admins (they manage its workspaces' builds).
        can_start_stop=services.can_start_stop(user, workspace),
        **_sharing_context(user, workspace),
        stream_seen=seen,
    )


def _sharing_context(user: User, workspace: Workspace) -> dict[str, object]:
    """The Sharing card's: the list, and for its owner the picker's names."""
    can_share = services.can_share(user, workspace)
    users, groups = sharing_views.picker_names(workspace) if can_share else ([], [])
    return {
        "sharing": sharing.sharing_list(workspace),
        "can_share": can_share,
        "picker_users": users,
        "picker_groups": groups,
    }


@bp.route("/workspaces/<workspace_id>/parameters", methods=["GET", "POST"])
def change_parameters(workspace_id: str) -> str | Response | tuple[str, int]:
    """Coder's "Workspace settings > Parameters": the mutable parameters of the version a start would build, filled
    in from the latest build; saving starts a build with them (as an update does: on a running workspace Terraform
    applies the change in place). Immutable ones are shown, not editable; ephemeral ones start from their default,
    as each build asks for them anew."""
    user = page_user()
    workspace = services.get_workspace_for(user, workspace_id, need="act")
    latest = services.latest_build(workspace)
    version = catalog.get_version(services.version_for_start(user, workspace, None) or latest.template_version_id)
    declared = form_parameters(version.parameters)
    stored = {item.name: item.value for item in latest.parameters}
    editable = [parameter.name for parameter in declared if parameter.mutable]
    values = {
        parameter.name: parameter.default_value if parameter.ephemeral else stored.get(parameter.name, "")
        for parameter in declared
        if parameter.mutable and (parameter.ephemeral or parameter.name in stored)
    }
    errors: dict[str, str] = {}
    status = 200
    if request.method == "POST":
        values = form_values(declared, request.form, editable)
        try:
            # None: the version a plain start builds (the latest build's, or the active one where policy says).
            build = services.create_build(user, workspace, "start", values)
        except DomainError as error:
            errors = {item["field"]: item["detail"] for item in error.validations} or {"_": error.message}
            status = error.status
        else:
            flash("Building with the new parameters.", "info")
            return redirect(url_for("workspaces.build", build_id=build.id))
    labels = field_labels(declared)
    page = render_template(
        "workspaces/parameters.html",
        workspace=workspace,
        latest=latest,
        version=version,
        parameters=declared,
        stored=stored,
        values=values,
        errors=errors,
        labels=labels,
    )
    return page, status


def _ttl_hours(workspace: Workspace) -> str:
    return f"{workspace.ttl_ms / 3_600_000:g}" if workspace.ttl_ms else ""


@bp.post("/workspaces/<workspace_id>/builds")
def transition(workspace_id: str) -> Response:
    user = page_user()
    transition = request.form.get("transition", "")
    workspace = services.get_workspace_for(user, workspace_id, need=services.build_need(transition, {}, None))
    if transition == "delete":  # only through the page that asks for the name
        return redirect(url_for("workspaces.delete", workspace_id=workspace.id))
    try:
        build = services.create_build(user, workspace, transition, {})
    except DomainError as error:
        flash(error.message + "".join(f" {item['field']}: {item['detail']}" for item in error.validations), "error")
        return redirect(url_for("workspaces.show", workspace_id=workspace.id))
    return redirect(url_for("workspaces.build", build_id=build.id))


@bp.route("/workspaces/<workspace_id>/delete", methods=["GET", "POST"])
def delete(workspace_id: str) -> str | Response | tuple[str, int]:
    """Deleting asks for the workspace's name; then the list, which no longer shows it once the delete is done
    (the build's page would soon be a 404)."""
    user = page_user()
    workspace = services.get_workspace_for(user, workspace_id, need="act")
    if request.method == "POST":
        try:
            services.delete_workspace(user, workspace, request.form.get("name", ""))
        except DomainError as error:
            page = render_template("workspaces/delete.html", workspace=workspace, error=error.message)
            return page, error.status
        flash(f"{workspace.name} is being deleted.", "info")
        return redirect(url_for("workspaces.index"))
    return render_template("workspaces/delete.html", workspace=workspace, error="")


@bp.get("/builds/<build_id>")
def build(build_id: str) -> str:
    user = page_user()
    found = services.get_build_for(user, build_id)
    context = log_page_context(found.job)  # first: the status shown must not be newer than the lines
    can_confirm = services.can_act(user, found.workspace)
    return render_template(
        "workspaces/build.html",
        build=found,
        # The build's own status (succeeded, failed…), not the workspace's: "running" beside "Succeeded in 2s"
        # read as a contradiction. The workspace's status is on the workspace's page.
        status=found.job.status,
        job_status=True,
        can_confirm=can_confirm,
        retry_url=_retry_url(user, found),
        change_parameters_url=_change_parameters_url(user, found),
        failure=failure_hints.explain(found, failure_cause(found.job)),
        sections=job_sections(found.job, f"build #{found.build_number}"),
        **context,
    )


def _retry_url(user: User, build: WorkspaceBuild) -> str | None:
    """Where to retry ``build`` from its page, when it failed and the viewer may build its workspace; a build
    that the workspace has since moved past is retried by building again, not from here."""
    if build.job.status != FAILED or not services.can_act(user, build.workspace):
        return None
    if services.latest_build(build.workspace).id != build.id:
        return None
    return url_for("workspaces.retry", build_id=build.id)


def _change_parameters_url(user: User, build: WorkspaceBuild) -> str | None:
    """Where to change the parameters a failed build used, offered beside Retry when the same viewer could retry it
    (the change builds anew from the latest build's values)."""
    if _retry_url(user, build) is None:
        return None
    return url_for("workspaces.change_parameters", workspace_id=build.workspace_id)


@bp.get("/builds/<build_id>/log/stream")
def build_log_stream(build_id: str) -> Response:
    user = page_user()
    found = services.get_build_for(user, build_id)
    link = url_for("workspaces.show", workspace_id=found.workspace_id)
    follow_up = Markup(f' <a class="btn btn-small" href="{escape(link)}">Open workspace</a>')  # noqa: S704 - escaped
    can_act = services.can_act(user, found.workspace)
    retry_url = url_for("workspaces.retry", build_id=found.id) if can_act else None
    build_id = found.id

    def explain(cause: FailureCause) -> FailureCause | None:
        # Read again when the stream ends: the build loaded for the request is not this session's to use later.
        ended = db.session.get(WorkspaceBuild, build_id)
        return failure_hints.explain(ended, cause) if ended is not None else cause

    change_url = url_for("workspaces.change_parameters", workspace_id=found.workspace_id) if can_act else None
    return page_stream(
        found.job,
        lambda job: job.status,
        job_status=True,
        follow_up=follow_up,
        retry_url=retry_url,
        failure_hints=FailureHints(explain, change_url),
    )


@bp.post("/builds/<build_id>/retry")
def retry(build_id: str) -> Response:
    """Retry a failed build (same transition, version and parameters); ``debug=1`` runs its Terraform with
    TF_LOG=debug."""
    user = page_user()
    found = services.get_build_for(user, build_id)

    def retry_build(debug_logging: bool) -> str:
        retried = services.retry_build(user, found, debug_logging=debug_logging)
        return url_for("workspaces.build", build_id=retried.id)

    return retry_from_form(retry_build, url_for("workspaces.build", build_id=found.id), "build")


@bp.post("/builds/<build_id>/confirm")
def confirm(build_id: str) -> Response:
    user = page_user()
    found = services.get_build_for(user, build_id)
    try:
        services.confirm_build(user, found)
        flash("Confirmed: the plan is being applied.", "info")
    except DomainError as error:
        flash(error.message, "error")
    return redirect(url_for("workspaces.build", build_id=found.id))


@bp.post("/builds/<build_id>/cancel")
def cancel(build_id: str) -> Response:
    user = page_user()
    found = services.get_build_for(user, build_id)
    if not (services.can_use(user, found.workspace) or user.is_template_admin):
        flash("Only those who may use the workspace (or an admin) may cancel its builds.", "error")
    else:
        try:
            cancel_job(found.job)
            flash("Cancel requested.", "info")
        except DomainError as error:
            flash(error.message, "error")
    return redirect(url_for("workspaces.build", build_id=found.id))
