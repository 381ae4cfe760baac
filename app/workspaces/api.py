"""API.md "Workspaces and builds"."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from flask import Response, jsonify, request

from app.auth.access import api_user, require_role
from app.auth.blueprints import api_blueprint
from app.catalog.presets import PRESET_FIELD
from app.catalog.services import get_version
from app.core.columns import rfc3339
from app.core.errors import Forbidden, InvalidInput
from app.core.pagination import PageRequest, with_total
from app.core.validation import FieldErrors, json_body, string_field
from app.provisioning.jobs import cancel_job
from app.provisioning.log_api import logs_response
from app.provisioning.presenter import jobs_json
from app.resources.models import WorkspaceResource
from app.resources.presenter import health_of, resource_json
from app.resources.services import job_resources, jobs_resources
from app.users.models import ROLE_AUDITOR, ROLE_OWNER, ROLE_TEMPLATE_ADMIN, ROLE_USER_ADMIN, User
from app.users.services import get_user_by_reference
from app.workspaces import failure_hints, quotas, services, updates
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.parameters import parameter_values_field
from app.workspaces.search import searched, sorted_workspaces
from protocol.codec import JsonObject
from protocol.logs import FailureCause

bp = api_blueprint("workspaces_api", __name__)


def builds_json(
    builds: Sequence[WorkspaceBuild], resources: Mapping[str, list[WorkspaceResource]] | None = None, *, viewer: User
) -> list[JsonObject]:
    """API.md's build objects for a list of builds, in a fixed number of queries (jobs, queue places, resources
    with their agents), whatever the number of builds. Agent scripts' text only for whom may act on the workspace
    (its owner, deployment owners): a template admin reading someone's workspace does not get it."""
    jobs = jobs_json([build.job for build in builds])
    if resources is None:
        resources = jobs_resources([build.job_id for build in builds])
    return [
        {
            "id": build.id,
            "workspace_id": build.workspace_id,
            "workspace_name": build.workspace.name,
            "build_number": build.build_number,
            "transition": build.transition,
            "status": services.build_status(build),
            "template_version_id": build.template_version_id,
            "template_version_name": build.template_version.name,
            "template_version_preset_id": build.template_version_preset_id,
            "initiator_id": build.initiator_id,
            "reason": build.reason,
            "deadline": rfc3339(build.deadline),
            "max_deadline": rfc3339(build.max_deadline),
            "created_at": rfc3339(build.created_at),
            "job": jobs[build.job_id],
            "resources": [
                resource_json(resource, script_text=services.can_act(viewer, build.workspace))
                for resource in resources.get(build.job_id, [])
            ],
        }
        for build in builds
    ]


def build_json(build: WorkspaceBuild, *, viewer: User) -> JsonObject:
    """One build's object; a failed one's cause also names the parameters it likely comes from (read for one build,
    never for lists: it may read the template's HCL)."""
    shown = builds_json([build], viewer=viewer)[0]
    job = shown["job"]
    if isinstance(job, dict) and isinstance(failure := job.get("failure"), dict):
        explained = failure_hints.explain(build, FailureCause.from_json(failure))
        shown["job"] = {**job, "failure": explained.to_json() if explained is not None else None}
    return shown


def workspaces_json(workspaces: Sequence[Workspace], *, viewer: User) -> list[JsonObject]:
    """API.md's workspace objects, in the same few queries for any number of workspaces."""
    latest = services.latest_builds(workspaces)
    builds = list(latest.values())
    resources = jobs_resources([build.job_id for build in builds])
    built = dict(
        zip([build.workspace_id for build in builds], builds_json(builds, resources, viewer=viewer), strict=True)
    )
    return [
        _workspace_json(
            workspace, latest[workspace.id], built[workspace.id], resources.get(latest[workspace.id].job_id, [])
        )
        for workspace in workspaces
    ]


def _workspace_json(
    workspace: Workspace, latest: WorkspaceBuild, built: JsonObject, resources: Sequence[WorkspaceResource]
) -> JsonObject:
    failing = [agent.id for resource in resources for agent in resource.agents if not health_of(agent).healthy]
    return {
        "id": workspace.id,
        "name": workspace.name,
        "owner_id": workspace.owner_id,
        "owner_name": workspace.owner.username,
        "template_id": workspace.template_id,
        "template_name": workspace.template.name,
        "template_active_version_id": workspace.template.active_version_id,
        "template_require_active_version": workspace.template.require_active_version,
        "outdated": services.is_outdated(workspace, latest),
        "automatic_updates": workspace.automatic_updates,
        "autostart_schedule": workspace.autostart_schedule,
        "ttl_ms": workspace.ttl_ms,
        "next_start_at": rfc3339(workspace.next_start_at),
        "last_used_at": rfc3339(workspace.last_used_at),
        "dormant_at": rfc3339(workspace.dormant_at),
        "deleting_at": rfc3339(workspace.deleting_at),
        "status": services.build_status(latest),
        "latest_build": built,
        # Reference §1.3: unhealthy when any agent of the current build is (a stopped workspace has none).
        "health": {"healthy": not failing, "failing_agents": failing},
        "created_at": rfc3339(workspace.created_at),
        "updated_at": rfc3339(workspace.updated_at),
    }


def workspace_json(workspace: Workspace, *, viewer: User) -> JsonObject:
    return workspaces_json([workspace], viewer=viewer)[0]


@bp.post("/workspaces")
def create_workspace() -> tuple[Response, int]:
    body, errors = json_body(), FieldErrors()
    template_id = string_field(body, "template_id", errors)
    name = string_field(body, "name", errors)
    version_id = string_field(body, "template_version_id", errors, required=False) or None
    preset_id = string_field(body, PRESET_FIELD, errors, required=False) or None
    errors.raise_if_any()
    values = parameter_values_field(body)
    workspace = services.create_workspace(
        api_user(), template_id, name, values, version_id, schedule=body, preset_id=preset_id
    )
    return jsonify(workspace_json(workspace, viewer=api_user())), 201


@bp.get("/workspaces")
def list_workspaces() -> Response:
    """A page of what the caller may see (``?limit=&offset=``); ``X-Total-Count`` says how many there are."""
    owner = request.args.get("owner", "")
    if owner not in ("", "me"):
        raise InvalidInput("owner may only be 'me'.")
    user = api_user()
    query = services.visible_workspaces_query(user, only_mine=owner == "me", name=request.args.get("name") or None)
    # Coder's filter: owner:me template:docker status:running outdated:true name:dev
    query = sorted_workspaces(searched(query, request.args.get("q", ""), user), request.args.get("sort", ""))
    workspaces, total = PageRequest.from_args().rows(query)
    return with_total(jsonify(workspaces_json(workspaces, viewer=user)), total)


@bp.get("/workspaces/<workspace_id>")
def get_workspace(workspace_id: str) -> Response:
    user = api_user()
    return jsonify(workspace_json(services.get_workspace_for(user, workspace_id), viewer=user))


@bp.get("/workspaces/<workspace_id>/builds")
def list_builds(workspace_id: str) -> Response:
    workspace = services.get_workspace_for(api_user(), workspace_id)
    builds, total = PageRequest.from_args(after_id=True).rows(services.builds_query(workspace))
    return with_total(jsonify(builds_json(builds, viewer=api_user())), total)


@bp.post("/workspaces/<workspace_id>/builds")
def create_build(workspace_id: str) -> tuple[Response, int]:
    body, errors = json_body(), FieldErrors()
    transition = string_field(body, "transition", errors)
    version_id = string_field(body, "template_version_id", errors, required=False) or None
    preset_id = string_field(body, PRESET_FIELD, errors, required=False) or None
    errors.raise_if_any()
    user = api_user()
    values = parameter_values_field(body)
    # A share to use it starts and stops it as it is; a preset, new values or another version is an admin's.
    need = services.build_need(transition, values, version_id) if preset_id is None else "build"
    workspace = services.get_workspace_for(user, workspace_id, need=need)
    build = services.create_build(user, workspace, transition, values, version_id, preset_id=preset_id)
    return jsonify(build_json(build, viewer=user)), 201


@bp.get("/templateversions/<version_id>/promotion-check")
@require_role(ROLE_OWNER, ROLE_TEMPLATE_ADMIN)
def promotion_check(version_id: str) -> Response:
    """Before promoting: the workspaces the version would leave outdated, and those needing new parameter values."""
    return jsonify(updates.promotion_check(get_version(version_id)))


@bp.get("/workspacebuilds/<build_id>")
def get_build(build_id: str) -> Response:
    user = api_user()
    return jsonify(build_json(services.get_build_for(user, build_id), viewer=user))


@bp.get("/workspacebuilds/<build_id>/resources")
def build_resources(build_id: str) -> Response:
    user = api_user()
    build = services.get_build_for(user, build_id)
    script_text = services.can_act(user, build.workspace)
    return jsonify([resource_json(resource, script_text=script_text) for resource in job_resources(build.job_id)])


@bp.get("/workspacebuilds/<build_id>/parameters")
def build_parameters(build_id: str) -> Response:
    return jsonify([value.to_json() for value in services.get_build_for(api_user(), build_id).parameters])


@bp.get("/workspacebuilds/<build_id>/logs")
def build_logs(build_id: str) -> Response:
    return logs_response(services.get_build_for(api_user(), build_id).job)


@bp.get("/workspacebuilds/<build_id>/plan")
def build_plan(build_id: str) -> Response:
    """The plan a build stopped on for confirmation (it destroys persistent resources), or last confirmed."""
    return jsonify(services.plan_review(services.get_build_for(api_user(), build_id)))


@bp.post("/workspacebuilds/<build_id>/confirm")
def confirm_build(build_id: str) -> Response:
    """Apply the plan shown by GET .../plan (re-planned first if the state moved on since)."""
    user = api_user()
    build = services.get_build_for(user, build_id)
    services.confirm_build(user, build)
    return jsonify(build_json(build, viewer=user))


@bp.patch("/workspacebuilds/<build_id>/cancel")
def cancel_build(build_id: str) -> Response:
    user = api_user()
    build = services.get_build_for(user, build_id)
    if not (services.can_use(user, build.workspace) or user.is_template_admin):
        raise Forbidden("Only those who may use the workspace (or an admin) may cancel its builds.")
    cancel_job(build.job)
    return jsonify(build_json(build, viewer=user))


@bp.get("/workspace-quota/<user_ref>")
def workspace_quota(user_ref: str) -> Response:
    """Coder's ``{credits_consumed, budget}`` of a person (``me``, id or username): theirs to read, and owners',
    user admins' and auditors'."""
    caller = api_user()
    if user_ref == "me":
        person = caller
    elif caller.has_role(ROLE_OWNER, ROLE_USER_ADMIN, ROLE_AUDITOR):
        person = get_user_by_reference(user_ref)
    else:
        if user_ref not in (caller.id, caller.username) and user_ref.lower() != caller.username.lower():
            raise Forbidden("Only the person themselves, owners, user admins and auditors can read a quota.")
        person = caller
    return jsonify(quotas.quota_of(person).to_json())
