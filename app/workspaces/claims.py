"""Claiming a prebuilt workspace (issue 42 part 2): a person's create with a preset takes one of the ``prebuilds``
system user's ready workspaces of the same version, preset and parameter values instead of building from nothing.

Atomic on both databases by a conditional UPDATE: the owner changes only ``WHERE owner_id`` is still the
``prebuilds`` user, so of two people racing for one prebuild exactly one changes the row and the other moves on to
the next candidate (or to a normal build). Then a start build with the new owner runs, so that the template sees
its real owner (``data.coder_workspace_owner``). No candidate is no error: the caller builds as usual.

The running agent gets a new token: the claim gives each of the prebuild's agents a pending one, the claim build
hands it to Terraform (the provider changes ``coder_agent.token`` in place, so a template that keeps its
infrastructure across a change of owner keeps its running process), and the agent's control connection hands it to
the agent once that build has succeeded (app/agents/control.py). The old token is refused from the claim on: its
build is no longer the workspace's current one.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

from sqlalchemy import exists, select, update

from app.audit.recorder import ACTION_WRITE, change, record
from app.catalog.models import Template, TemplateVersion
from app.core.columns import utcnow
from app.core.extensions import db, rows_changed
from app.provisioning.models import SUCCEEDED, ProvisionerJob
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.users.models import PREBUILDS_USER_ID, User
from app.workspaces.models import Workspace, WorkspaceBuild
from protocol.provisionerd import NameValue

# Candidates read per claim: enough that a handful of concurrent claims each find one left.
_CANDIDATES = 8


def ready_prebuilds(template: Template, version: TemplateVersion, preset_id: str) -> list[str]:
    """Ids of the ``prebuilds`` user's workspaces of this version and preset whose latest build is a succeeded start
    and whose every agent is ready, oldest first."""
    not_ready = (
        select(WorkspaceAgent.id)
        .join(WorkspaceResource, WorkspaceResource.id == WorkspaceAgent.resource_id)
        .where(WorkspaceResource.job_id == WorkspaceBuild.job_id, WorkspaceAgent.lifecycle_state != "ready")
    )
    query = (
        select(Workspace.id)
        .join(WorkspaceBuild, WorkspaceBuild.id == Workspace.latest_build_id)
        .join(ProvisionerJob, ProvisionerJob.id == WorkspaceBuild.job_id)
        .where(
            Workspace.owner_id == PREBUILDS_USER_ID,
            Workspace.deleted.is_(False),
            Workspace.template_id == template.id,
            WorkspaceBuild.template_version_id == version.id,
            WorkspaceBuild.template_version_preset_id == preset_id,
            WorkspaceBuild.transition == "start",
            ProvisionerJob.status == SUCCEEDED,
            ~exists(not_ready),
        )
        .order_by(Workspace.created_at, Workspace.id)
        .limit(_CANDIDATES)
    )
    return list(db.session.scalars(query))


def claim_for(
    owner: User, template: Template, version: TemplateVersion, preset_id: str | None, name: str,
    values: Sequence[NameValue],
) -> Workspace | None:  # fmt: skip
    """Give ``owner`` a ready prebuild named ``name`` whose parameter values are ``values`` (flushed, not
    committed: the caller queues the start build and commits), or None when there is none to claim."""
    if not preset_id:
        return None
    wanted = {(item.name, item.value) for item in values}
    for workspace_id in ready_prebuilds(template, version, preset_id):
        prebuild = db.session.get_one(Workspace, workspace_id)
        old_name = prebuild.name
        build = db.session.get(WorkspaceBuild, prebuild.latest_build_id)
        if build is None or {(item.name, item.value) for item in build.parameters} != wanted:
            continue  # the person chose other values beyond the preset's: this prebuild is not theirs to use
        claimed = db.session.execute(
            update(Workspace)
            .where(Workspace.id == workspace_id, Workspace.owner_id == PREBUILDS_USER_ID)
            .values(owner_id=owner.id, name=name, name_key=name.lower(), created_at=utcnow(), updated_at=utcnow())
            .execution_options(synchronize_session=False)
        )
        if rows_changed(claimed) == 1:
            # The UPDATE is below the session's audited flush: the claim is recorded as the change it is.
            diff = {"owner_id": change(owner.id, PREBUILDS_USER_ID), "name": change(name, old_name)}
            record("workspace", workspace_id, name, ACTION_WRITE, diff)
            db.session.refresh(prebuild)
            for agent in build_agents(build):
                agent.pending_token = secrets.token_urlsafe(32)
            return prebuild
    return None


def build_agents(build: WorkspaceBuild) -> list[WorkspaceAgent]:
    return list(
        db.session.scalars(
            select(WorkspaceAgent)
            .join(WorkspaceResource, WorkspaceResource.id == WorkspaceAgent.resource_id)
            .where(WorkspaceResource.job_id == build.job_id)
        )
    )


def running_agent_tokens(earlier: WorkspaceBuild | None) -> dict[str, str]:
    """For the build after ``earlier``: the Terraform id of each of its agents that a claim gave a new token ->
    that token (empty for any build but a claim's)."""
    if earlier is None:
        return {}
    return {
        agent.definition.id: agent.pending_token
        for agent in build_agents(earlier)
        if agent.pending_token and agent.definition.id
    }
