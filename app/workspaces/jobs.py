"""Workspace builds as provisioner jobs: what the daemon gets, and what its result stores on the build."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from flask import url_for
from sqlalchemy import select

from app.catalog.models import Template
from app.catalog.services import sensitive_variable_values
from app.core.columns import utcnow
from app.core.errors import InvalidInput
from app.core.extensions import db
from app.externalauth import services as external_auth
from app.files.services import archive_bytes
from app.notifications.services import BUILD_FAILED, notify
from app.provisioning.jobs import JobHandlers, JobSubject
from app.provisioning.models import ProvisionerJob
from app.resources.models import WorkspaceResource
from app.resources.services import store_resources
from app.users.models import User
from app.usersecrets import services as user_secrets
from app.workspaces import claims, quotas
from app.workspaces.deadlines import start_deadlines
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import build_for_job
from protocol.provisionerd import AcquiredJob, BuildJob, BuildMetadata, JobCompletion, JobFailure

AgentScripts = Callable[[], Mapping[str, str]]


def build_payload(job: ProvisionerJob, base: AcquiredJob, *, agent_scripts: AgentScripts) -> AcquiredJob:
    build = build_for_job(job)
    workspace, version = build.workspace, build.template_version
    template, owner = workspace.template, workspace.owner
    earlier = db.session.scalar(
        select(WorkspaceBuild)
        .where(WorkspaceBuild.workspace_id == workspace.id, WorkspaceBuild.build_number < build.build_number)
        .order_by(WorkspaceBuild.build_number.desc())
        .limit(1)
    )
    # A claim of a prebuilt workspace: its running agents' new tokens (none for any other build).
    agent_tokens = claims.running_agent_tokens(earlier) if build.transition == "start" else {}
    body = BuildJob(
        workspace_build_id=build.id,
        transition=build.transition,  # type: ignore[arg-type]  # one of TRANSITIONS, checked when it was created
        archive=archive_bytes(job.file_id),
        state=build.state or b"",
        parameters=build.parameters,
        previous_parameters=earlier.parameters if earlier else (),
        variable_values=version.user_variable_values,
        metadata=BuildMetadata(
            workspace_name=workspace.name,
            workspace_id=workspace.id,
            workspace_build_id=build.id,
            owner_name=owner.username,
            owner_id=owner.id,
            owner_email=owner.email,
            owner_full_name=owner.username,
            owner_login_type=owner.login_type,
            template_id=template.id,
            template_name=template.name,
            template_version=version.name,
        ),
        agent_scripts=dict(agent_scripts()),
        external_auth_tokens=external_auth.build_tokens(owner, version.external_auth),
        secret_env=user_secrets.build_secret_env(owner.id, version.secrets),
        running_agent_tokens=agent_tokens,
        # A claim has nothing to protect (a prebuild holds nobody's work yet), and a plan to review first would cost
        # the person waiting for it two more Terraform runs.
        protect_persistent=template.protect_persistent_resources and build.transition != "delete" and not agent_tokens,
        persistent_resources=persistent_resources(version.job_id),
        # Only a confirmed job runs again after its plan was saved: the plan it ran is the one confirmed.
        confirmed_plan=build.saved_plan or b"",
        debug_logging=job.debug_logging,
        # Only a start can cost more than the workspace does now (a stop keeps less, a delete nothing).
        commit_quota=build.transition == "start" and quotas.applies_to(owner, template),
    )
    return replace(base, workspace_build=body)


def build_commit_quota(job: ProvisionerJob, daily_cost: int) -> str:
    """The daemon's question between plan and apply: "" when the build's daily cost fits its owner's budget."""
    build = build_for_job(job)
    workspace = build.workspace
    refusal = quotas.check_build(workspace.owner, workspace.template, workspace.id, daily_cost)
    if not refusal:  # counted for its owner from now on, while it applies (the next check sees it)
        build.daily_cost = daily_cost
    return refusal or ""


def persistent_resources(import_job_id: str) -> tuple[str, ...]:
    """ "<type>.<name>" of the resources the version's import found outlive a stop (a home volume)."""
    rows = db.session.execute(
        select(WorkspaceResource.type, WorkspaceResource.name).where(
            WorkspaceResource.job_id == import_job_id,
            WorkspaceResource.transition == "start",
            WorkspaceResource.lifecycle == "persistent",
        )
    )
    return tuple(sorted({f"{kind}.{name}" for kind, name in rows}))


def build_complete(job: ProvisionerJob, completion: JobCompletion) -> None:
    result = completion.workspace_build
    if result is None:
        raise InvalidInput("A build's completion must carry its workspace_build result.")
    build = build_for_job(job)
    if result.review is not None:  # stopped before applying: nothing changed, the plan waits for a person
        build.plan_review = replace(result.review, plan=b"").to_json()
        build.saved_plan = result.review.plan
        return
    build.state = result.state or build.state
    store_resources(job.id, build.transition, result.resources)
    workspace = build.workspace
    if build.transition == "start":
        build.deadline, build.max_deadline = start_deadlines(
            workspace, workspace.template, workspace.owner, job.completed_at or utcnow()
        )
    if build.transition == "delete":
        workspace.deleted = True


def build_fail(job: ProvisionerJob, failure: JobFailure) -> None:
    # An apply that failed part-way still changed real infrastructure: keep the state Terraform left, and list
    # the resources it holds as this build's (they exist and run; the workspace page and the API show them).
    if failure.state:
        build = build_for_job(job)
        build.state = failure.state
        store_resources(job.id, build.transition, failure.resources)


def build_late(job: ProvisionerJob, state: bytes) -> str:
    """The daemon finished the build after the server had failed it. Its state says what Terraform really did:
    it is recorded, so that the next build starts from there, unless a newer build has run meanwhile (starting
    from the older state, it owns the workspace's state now)."""
    build = build_for_job(job)
    if build.state == state:
        return ""  # reported again (a reply lost): recorded already
    if build.workspace.latest_build_id != build.id:
        return (
            "The provisioner daemon finished this build after the server had ended it, but a newer build has run "
            "since: the Terraform state this build left was not recorded. Check the workspace's resources."
        )
    build.state = state
    return (
        "The provisioner daemon finished this build after the server had ended it: the Terraform state it left is "
        "recorded, so the next build starts from what Terraform really did."
    )


def build_failed(job: ProvisionerJob) -> None:
    """Tell the workspace's owner (the build-failed notification), whoever started the build."""
    if job.canceled_at is not None:
        return
    build = build_for_job(job)
    workspace = build.workspace
    reason = "" if build.reason == "initiator" else f" ({build.reason.replace('_', ' ')})"
    notify(
        workspace.owner_id, BUILD_FAILED,
        title=f"{build.transition.capitalize()} of {workspace.name} failed{reason}",
        body=(job.error or "")[:2000], link=f"/builds/{build.id}", workspace_id=workspace.id,
    )  # fmt: skip
    db.session.commit()


def build_secrets(job: ProvisionerJob) -> list[str]:
    build = build_for_job(job)
    owner_id = build.workspace.owner_id
    return (
        sensitive_variable_values(build.template_version)
        + external_auth.stored_tokens(owner_id)
        + user_secrets.stored_values(owner_id)
    )


def build_subjects(jobs: Sequence[ProvisionerJob]) -> dict[str, JobSubject]:
    # Only the columns a subject shows, joined by key: one query of a few index probes per build (loading the whole
    # rows took four queries and most of a job list's time).
    rows = db.session.execute(
        select(
            WorkspaceBuild.id, WorkspaceBuild.job_id, WorkspaceBuild.transition, WorkspaceBuild.build_number,
            Workspace.name, Workspace.owner_id, User.username, Template.name,
        )
        .join(Workspace, Workspace.id == WorkspaceBuild.workspace_id)
        .join(User, User.id == Workspace.owner_id)
        .join(Template, Template.id == Workspace.template_id)
        .where(WorkspaceBuild.job_id.in_([job.id for job in jobs]))
    )  # fmt: skip
    return {
        job_id: JobSubject(
            title=f"{transition.capitalize()} {owner_name}/{workspace_name} #{number}",
            url=url_for("workspaces.build", build_id=build_id),
            template_name=template_name,
            workspace_name=workspace_name,
            workspace_owner_id=owner_id,
        )
        for build_id, job_id, transition, number, workspace_name, owner_id, owner_name, template_name in rows
    }


def build_handlers(agent_scripts: AgentScripts) -> JobHandlers:
    """The handlers of workspace builds; the agents feature supplies the init scripts the provider hands out."""

    def payload(job: ProvisionerJob, base: AcquiredJob) -> AcquiredJob:
        return build_payload(job, base, agent_scripts=agent_scripts)

    return JobHandlers(
        payload=payload,
        complete=build_complete,
        result="workspace_build",
        fail=build_fail,
        failed=build_failed,
        late=build_late,
        secrets=build_secrets,
        describe=build_subjects,
        commit_quota=build_commit_quota,
    )
