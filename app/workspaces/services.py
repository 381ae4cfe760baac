"""Workspaces and their builds. Each build is a provisioner job; the workspace's status follows its latest build."""

from __future__ import annotations

import base64
from typing import Any

from flask import url_for
from sqlalchemy import func, select
from sqlalchemy.exc import IntegrityError

from app.agents.bootstrap import agent_scripts
from app.catalog.models import Template, TemplateVersion
from app.catalog.services import get_template, get_version, sensitive_variable_values
from app.columns import utcnow
from app.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.extensions import db
from app.files.services import get_file
from app.provisioning.jobs import JobHandlers, JobSubject, dispatch, new_job, register_job_type
from app.provisioning.models import JOB_WORKSPACE_BUILD, SUCCEEDED, ProvisionerJob
from app.provisioning.resources import store_resources
from app.provisioning.tags import normalise_tags
from app.users.models import User
from app.validation import USERNAME_PATTERN
from app.workspaces.models import TRANSITIONS, Workspace, WorkspaceBuild
from app.workspaces.parameters import resolve_parameters

IN_PROGRESS = {"start": "starting", "stop": "stopping", "delete": "deleting"}
DONE = {"start": "running", "stop": "stopped", "delete": "deleted"}


def build_status(build: WorkspaceBuild) -> str:
    return status_for(build.job.status, build.transition)


def status_for(job_status: str, transition: str) -> str:
    """Reference §2.2: a build's job status read through its transition (a started build is "running")."""
    if job_status == "running":
        return IN_PROGRESS[transition]
    if job_status == SUCCEEDED:
        return DONE[transition]
    return job_status


def check_workspace_name(name: str) -> str:
    name = name.strip()
    if not 1 <= len(name) <= 32 or not USERNAME_PATTERN.match(name):
        raise InvalidInput(
            "Invalid workspace name.",
            validations=[{"field": "name", "detail": "Use 1-32 letters, digits and single hyphens."}],
        )
    return name


def can_read(user: User, workspace: Workspace) -> bool:
    return workspace.owner_id == user.id or user.is_template_admin


def can_act(user: User, workspace: Workspace) -> bool:
    return workspace.owner_id == user.id or user.is_owner


def get_workspace_for(user: User, workspace_id: str, need: str = "read") -> Workspace:
    """The workspace, if this user may ``read`` it or ``act`` on it; others get 404 (it may as well not exist)."""
    workspace = db.session.get(Workspace, workspace_id)
    if workspace is None or workspace.deleted or not can_read(user, workspace):
        raise NotFound("No such workspace.")
    if need == "act" and not can_act(user, workspace):
        raise Forbidden("Only the workspace's owner (or a deployment owner) may do that.")
    return workspace


def get_workspace_by_name_for(user: User, owner: User, name: str) -> Workspace:
    workspace: Workspace | None = db.session.scalar(
        select(Workspace).where(Workspace.owner_id == owner.id, Workspace.name == name, Workspace.deleted.is_(False))
    )
    if workspace is None or not can_read(user, workspace):
        raise NotFound(f"No workspace named {name!r}.")
    return workspace


def get_build_for(user: User, build_id: str) -> WorkspaceBuild:
    build = db.session.get(WorkspaceBuild, build_id)
    if build is None or not can_read(user, build.workspace):
        raise NotFound("No such workspace build.")
    return build


def visible_workspaces(user: User, *, only_mine: bool = False) -> list[Workspace]:
    query = select(Workspace).where(Workspace.deleted.is_(False)).order_by(Workspace.name)
    if only_mine or not user.is_template_admin:
        query = query.where(Workspace.owner_id == user.id)
    return list(db.session.scalars(query))


def latest_build(workspace: Workspace) -> WorkspaceBuild:
    build: WorkspaceBuild | None = db.session.scalar(
        select(WorkspaceBuild)
        .where(WorkspaceBuild.workspace_id == workspace.id)
        .order_by(WorkspaceBuild.build_number.desc())
        .limit(1)
    )
    assert build is not None  # noqa: S101 - a workspace is created together with its first build
    return build


def list_builds(workspace: Workspace) -> list[WorkspaceBuild]:
    query = (
        select(WorkspaceBuild)
        .where(WorkspaceBuild.workspace_id == workspace.id)
        .order_by(WorkspaceBuild.build_number.desc())
    )
    return list(db.session.scalars(query))


def create_workspace(
    owner: User, template_id: str, name: str, parameters: dict[str, str], version_id: str | None = None
) -> Workspace:
    name = check_workspace_name(name)
    template = get_template(template_id)
    version = _usable_version(template, version_id)
    taken = select(Workspace.id).where(
        Workspace.owner_id == owner.id, func.lower(Workspace.name) == name.lower(), Workspace.deleted.is_(False)
    )
    if db.session.scalar(taken):
        raise Conflict(f"You already have a workspace named {name!r}.")
    values = resolve_parameters(version.parameters, parameters, previous=None)
    workspace = Workspace(name=name, owner_id=owner.id, template_id=template.id)
    db.session.add(workspace)
    try:
        db.session.flush()
    except IntegrityError as exc:
        db.session.rollback()
        raise Conflict(f"You already have a workspace named {name!r}.") from exc
    job = _queue_build(owner, workspace, version, "start", values, state=None, number=1)
    db.session.commit()
    dispatch(job)
    return workspace


def create_build(
    actor: User, workspace: Workspace, transition: str, parameters: dict[str, str], version_id: str | None = None
) -> WorkspaceBuild:
    if transition not in TRANSITIONS:
        raise InvalidInput("transition must be start, stop or delete.")
    previous = latest_build(workspace)
    if previous.job.is_active:
        raise Conflict("A build of this workspace is already active; wait for it or cancel it.")
    version = _usable_version(workspace.template, version_id) if version_id else previous.template_version
    previous_values = {item["name"]: item["value"] for item in previous.parameters}
    values = resolve_parameters(version.parameters, parameters, previous=previous_values)
    job = _queue_build(
        actor, workspace, version, transition, values, state=previous.state, number=previous.build_number + 1
    )
    workspace.updated_at = utcnow()
    try:
        db.session.commit()
    except IntegrityError as exc:  # two builds raced for the same number
        db.session.rollback()
        raise Conflict("A build of this workspace is already active; wait for it or cancel it.") from exc
    dispatch(job)
    return _build_for_job(job)


def _usable_version(template: Template, version_id: str | None) -> TemplateVersion:
    version = get_version(version_id) if version_id else None
    if version is None:
        if template.active_version_id is None:
            raise InvalidInput("The template has no active version.")
        version = get_version(template.active_version_id)
    if version.template_id != template.id:
        raise InvalidInput("That version belongs to another template.")
    if version.job.status != SUCCEEDED:
        raise InvalidInput(f"That template version's import has not succeeded ({version.job.status}).")
    return version


def _queue_build(
    actor: User, workspace: Workspace, version: TemplateVersion, transition: str,
    values: list[dict[str, str]], *, state: bytes | None, number: int,
) -> ProvisionerJob:  # fmt: skip
    # Builds run where the version was imported, on behalf of the workspace's owner (user-scoped tags).
    tags = normalise_tags(version.job.tags, workspace.owner_id)
    job = new_job(JOB_WORKSPACE_BUILD, file_id=version.job.file_id, initiator_id=actor.id, tags=tags, job_input={})
    build = WorkspaceBuild(
        workspace_id=workspace.id, build_number=number, transition=transition, template_version_id=version.id,
        job=job, initiator_id=actor.id, state=state, parameters=values,
    )  # fmt: skip
    db.session.add(build)
    db.session.flush()
    job.input = {"workspace_build_id": build.id}
    return job


def _build_for_job(job: ProvisionerJob) -> WorkspaceBuild:
    build: WorkspaceBuild | None = db.session.scalar(select(WorkspaceBuild).where(WorkspaceBuild.job_id == job.id))
    if build is None:
        raise NotFound("The job's workspace build is gone.")
    return build


def _build_payload(job: ProvisionerJob) -> dict[str, Any]:
    build = _build_for_job(job)
    workspace, version = build.workspace, build.template_version
    template, owner = workspace.template, workspace.owner
    earlier = db.session.scalar(
        select(WorkspaceBuild)
        .where(WorkspaceBuild.workspace_id == workspace.id, WorkspaceBuild.build_number < build.build_number)
        .order_by(WorkspaceBuild.build_number.desc())
        .limit(1)
    )

    return {
        "workspace_build_id": build.id,
        "transition": build.transition,
        "archive": base64.b64encode(get_file(job.file_id).data).decode(),
        "state": base64.b64encode(build.state or b"").decode(),
        "parameters": build.parameters,
        "previous_parameters": earlier.parameters if earlier else [],
        "variable_values": version.user_variable_values,
        "metadata": {
            "workspace_name": workspace.name,
            "workspace_id": workspace.id,
            "workspace_build_id": build.id,
            "owner_name": owner.username,
            "owner_id": owner.id,
            "owner_email": owner.email,
            "owner_full_name": owner.username,
            "owner_login_type": owner.login_type,
            "template_id": template.id,
            "template_name": template.name,
            "template_version": version.name,
        },
        "agent_scripts": agent_scripts(),
    }


def _decode_state(body: dict[str, Any]) -> bytes | None:
    raw = body.get("state")
    if not raw:
        return None
    try:
        return base64.b64decode(str(raw), validate=True)
    except ValueError as exc:
        raise InvalidInput("state must be base64.") from exc


def _build_complete(job: ProvisionerJob, body: dict[str, Any]) -> None:
    build = _build_for_job(job)
    state = _decode_state(body)
    build.state = state if state is not None else build.state
    store_resources(job.id, build.transition, body.get("resources") or [])
    if build.transition == "delete":
        build.workspace.deleted = True


def _build_fail(job: ProvisionerJob, body: dict[str, Any]) -> None:
    # An apply that failed part-way still changed real infrastructure: keep the state Terraform left.
    state = _decode_state(body)
    if state is not None:
        _build_for_job(job).state = state


def _build_secrets(job: ProvisionerJob) -> list[str]:
    return sensitive_variable_values(_build_for_job(job).template_version)


def _build_subject(job: ProvisionerJob) -> JobSubject:
    build = _build_for_job(job)
    workspace = build.workspace
    return JobSubject(
        title=f"{build.transition.capitalize()} {workspace.owner.username}/{workspace.name} #{build.build_number}",
        url=url_for("workspaces.build", build_id=build.id),
        template_name=workspace.template.name,
        workspace_name=workspace.name,
        workspace_owner_id=workspace.owner_id,
    )


register_job_type(
    JOB_WORKSPACE_BUILD,
    JobHandlers(
        payload=_build_payload,
        complete=_build_complete,
        fail=_build_fail,
        secrets=_build_secrets,
        describe=_build_subject,
    ),
)
