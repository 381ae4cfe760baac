"""API.md "Workspaces and builds"."""

from __future__ import annotations

from typing import Any

from flask import Response, jsonify, request

from app.auth.access import api_user
from app.blueprints import api_blueprint, json_body
from app.columns import rfc3339
from app.errors import Forbidden, InvalidInput
from app.provisioning.jobs import cancel_job, job_json, logs_response
from app.provisioning.resources import job_resources
from app.validation import FieldErrors, string_field
from app.workspaces import services
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.parameters import parameter_values_field

bp = api_blueprint("workspaces_api", __name__)


def build_json(build: WorkspaceBuild) -> dict[str, Any]:
    resources = [resource.to_json() for resource in job_resources(build.job_id)]
    return {
        "id": build.id,
        "workspace_id": build.workspace_id,
        "workspace_name": build.workspace.name,
        "build_number": build.build_number,
        "transition": build.transition,
        "status": services.build_status(build),
        "template_version_id": build.template_version_id,
        "template_version_name": build.template_version.name,
        "initiator_id": build.initiator_id,
        "created_at": rfc3339(build.created_at),
        "job": job_json(build.job),
        "resources": resources,
    }


def workspace_json(workspace: Workspace) -> dict[str, Any]:
    latest = services.latest_build(workspace)
    built = build_json(latest)
    failing = [
        agent["id"] for resource in built["resources"] for agent in resource["agents"] if not agent["health"]["healthy"]
    ]
    return {
        "id": workspace.id,
        "name": workspace.name,
        "owner_id": workspace.owner_id,
        "owner_name": workspace.owner.username,
        "template_id": workspace.template_id,
        "template_name": workspace.template.name,
        "status": services.build_status(latest),
        "latest_build": built,
        # Reference §1.3: unhealthy when any agent of the current build is (a stopped workspace has none).
        "health": {"healthy": not failing, "failing_agents": failing},
        "created_at": rfc3339(workspace.created_at),
        "updated_at": rfc3339(workspace.updated_at),
    }


@bp.post("/workspaces")
def create_workspace() -> tuple[Response, int]:
    body, errors = json_body(), FieldErrors()
    template_id = string_field(body, "template_id", errors)
    name = string_field(body, "name", errors)
    version_id = string_field(body, "template_version_id", errors, required=False) or None
    errors.raise_if_any()
    values = parameter_values_field(body)
    workspace = services.create_workspace(api_user(), template_id, name, values, version_id)
    return jsonify(workspace_json(workspace)), 201


@bp.get("/workspaces")
def list_workspaces() -> Response:
    owner = request.args.get("owner", "")
    if owner not in ("", "me"):
        raise InvalidInput("owner may only be 'me'.")
    workspaces = services.visible_workspaces(api_user(), only_mine=owner == "me")
    name = request.args.get("name")
    if name:
        workspaces = [workspace for workspace in workspaces if workspace.name == name]
    return jsonify([workspace_json(workspace) for workspace in workspaces])


@bp.get("/workspaces/<workspace_id>")
def get_workspace(workspace_id: str) -> Response:
    return jsonify(workspace_json(services.get_workspace_for(api_user(), workspace_id)))


@bp.get("/workspaces/<workspace_id>/builds")
def list_builds(workspace_id: str) -> Response:
    workspace = services.get_workspace_for(api_user(), workspace_id)
    return jsonify([build_json(build) for build in services.list_builds(workspace)])


@bp.post("/workspaces/<workspace_id>/builds")
def create_build(workspace_id: str) -> tuple[Response, int]:
    body, errors = json_body(), FieldErrors()
    transition = string_field(body, "transition", errors)
    version_id = string_field(body, "template_version_id", errors, required=False) or None
    errors.raise_if_any()
    user = api_user()
    workspace = services.get_workspace_for(user, workspace_id, need="act")
    build = services.create_build(user, workspace, transition, parameter_values_field(body), version_id)
    return jsonify(build_json(build)), 201


@bp.get("/workspacebuilds/<build_id>")
def get_build(build_id: str) -> Response:
    return jsonify(build_json(services.get_build_for(api_user(), build_id)))


@bp.get("/workspacebuilds/<build_id>/resources")
def build_resources(build_id: str) -> Response:
    build = services.get_build_for(api_user(), build_id)
    return jsonify([resource.to_json() for resource in job_resources(build.job_id)])


@bp.get("/workspacebuilds/<build_id>/parameters")
def build_parameters(build_id: str) -> Response:
    return jsonify(services.get_build_for(api_user(), build_id).parameters)


@bp.get("/workspacebuilds/<build_id>/logs")
def build_logs(build_id: str) -> Response:
    return logs_response(services.get_build_for(api_user(), build_id).job)


@bp.patch("/workspacebuilds/<build_id>/cancel")
def cancel_build(build_id: str) -> Response:
    user = api_user()
    build = services.get_build_for(user, build_id)
    if not (services.can_act(user, build.workspace) or user.is_template_admin):
        raise Forbidden("Only the workspace's owner or an admin may cancel its builds.")
    cancel_job(build.job)
    return jsonify(build_json(build))
