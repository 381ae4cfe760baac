"""A template's workspaces as its page shows them, and what its admins do to the outdated ones: what promoting a
version would do (how many it leaves outdated, which could not update without new parameter values, their stored
values checked against the new version's rules as the update itself will check them), Update all, and Notify
owners."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import Select, func, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import joinedload

from app.audit.recorder import ACTION_WRITE, change, record
from app.catalog.models import Template, TemplateVersion
from app.catalog.services import get_version
from app.core.errors import DomainError, InvalidInput
from app.core.extensions import db
from app.notifications import services as notifications
from app.provisioning.jobs import dispatch
from app.users.models import PREBUILDS_USER_ID, User
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.parameters import resolve_parameters
from app.workspaces.services import (
    build_for_job,
    can_build,
    latest_builds,
    queue_build,
    visible_workspaces_query,
)
from protocol.codec import JSON, JsonObject
from protocol.tags import PRIORITY_LOW


def promotion_check(version: TemplateVersion) -> JsonObject:
    workspaces = list(
        db.session.scalars(
            select(Workspace)
            .where(Workspace.template_id == version.template_id, Workspace.deleted.is_(False))
            .options(joinedload(Workspace.owner))
            .order_by(Workspace.name)
        )
    )
    latest = latest_builds(workspaces)
    affected: list[JsonObject] = []
    for workspace in workspaces:
        build = latest.get(workspace.id)
        if build is None or build.template_version_id == version.id:
            continue
        needs: list[JSON] = [*needs_parameters(version, build)]
        affected.append(
            {
                "id": workspace.id,
                "name": workspace.name,
                "owner_name": workspace.owner.username,
                "needs_parameters": needs,
            }
        )
    return {"outdated_count": len(affected), "workspaces": affected}


def needs_parameters(version: TemplateVersion, build: WorkspaceBuild) -> list[str]:
    """The parameters a build of ``version`` would need new values for, the workspace's stored ones checked against
    the version's rules as the update itself will check them (empty: it can update as it is)."""
    stored = {value.name: value.value for value in build.parameters}
    try:
        resolve_parameters(version.parameters, {}, previous=stored)
    except InvalidInput as exc:
        return sorted({item["field"] for item in exc.validations}) or [exc.message]
    return []


# The template page's Workspaces card.


@dataclass(frozen=True)
class VersionCount:
    version_id: str
    name: str
    count: int
    active: bool


def template_workspaces_query(viewer: User, template: Template) -> Select[Workspace]:
    """The template's workspaces that ``viewer`` may see (the workspaces list's own rule), by name. Not its prebuilt
    ones: the reconciler replaces those itself (the template page shows them in its prebuilds card)."""
    return visible_workspaces_query(viewer).where(
        Workspace.template_id == template.id, Workspace.owner_id != PREBUILDS_USER_ID
    )


def version_counts(viewer: User, template: Template) -> list[VersionCount]:
    """How many of the workspaces ``viewer`` sees are on each version (their latest build's), the active first."""
    visible = template_workspaces_query(viewer, template).order_by(None).with_only_columns(Workspace.id)
    rows = db.session.execute(
        select(TemplateVersion.id, TemplateVersion.name, func.count(Workspace.id))
        .join(WorkspaceBuild, WorkspaceBuild.template_version_id == TemplateVersion.id)
        .join(Workspace, Workspace.latest_build_id == WorkspaceBuild.id)
        .where(Workspace.id.in_(visible))
        .group_by(TemplateVersion.id, TemplateVersion.name)
    )
    counts = [VersionCount(id_, name, count, id_ == template.active_version_id) for id_, name, count in rows]
    return sorted(counts, key=lambda item: (not item.active, -item.count, item.name))


def outdated_workspaces(template: Template) -> list[tuple[Workspace, WorkspaceBuild]]:
    """Every workspace of the template whose latest build is not on its active version, with that build."""
    if template.active_version_id is None:
        return []
    workspaces = list(
        db.session.scalars(
            select(Workspace)
            .join(WorkspaceBuild, WorkspaceBuild.id == Workspace.latest_build_id)
            .where(Workspace.template_id == template.id, Workspace.deleted.is_(False))
            .where(WorkspaceBuild.template_version_id != template.active_version_id)
            .options(joinedload(Workspace.owner), joinedload(Workspace.template))
            .order_by(Workspace.name_key, Workspace.id)
        )
    )
    latest = latest_builds(workspaces, with_state=True)
    return [(workspace, latest[workspace.id]) for workspace in workspaces]


# Update all: every outdated workspace started on the active version, at low priority (a person's own builds go
# first), each one that cannot be updated as it is skipped with the reason.

QUEUED, SKIPPED = "queued", "skipped"


@dataclass(frozen=True)
class UpdateOutcome:
    workspace_id: str
    name: str
    owner: str
    from_version: str
    outcome: str  # QUEUED (or, when planning, what would be) or SKIPPED
    reason: str = ""
    build_id: str = ""


def _skip_reason(actor: User, version: TemplateVersion, workspace: Workspace, build: WorkspaceBuild) -> str:
    if not can_build(actor, workspace):
        return "you may not build it (its owner, a deployment owner or its template's admins may)"
    if build.job.is_active:
        return f"a build is already {build.job.status}"
    if workspace.dormant_at is not None:
        return "dormant: it is activated (by its owner) before it builds again"
    needs = needs_parameters(version, build)
    if needs:
        return f"parameters need input ({', '.join(needs)}): its owner updates it from its page"
    return ""


def _outcome(workspace: Workspace, build: WorkspaceBuild, reason: str, build_id: str = "") -> UpdateOutcome:
    return UpdateOutcome(
        workspace.id, workspace.name, workspace.owner.username, build.template_version.name,
        SKIPPED if reason else QUEUED, reason, build_id,
    )  # fmt: skip


def plan_update_all(actor: User, template: Template) -> list[UpdateOutcome]:
    """What Update all would do to each outdated workspace, queueing nothing (the confirmation lists it)."""
    version = get_version(template.active_version_id) if template.active_version_id else None
    if version is None:
        return []
    return [
        _outcome(workspace, build, _skip_reason(actor, version, workspace, build))
        for workspace, build in outdated_workspaces(template)
    ]


def update_all(actor: User, template: Template) -> list[UpdateOutcome]:
    """Start every outdated workspace that can update as it is on the active version, at low priority; one that
    cannot (or whose build is refused now: a build that started meanwhile, a Git provider to link) is skipped
    with why. Each build commits on its own, so that one refusal undoes none of the others; the builds are audited
    as any build is, and the run itself as a change of the template naming what was queued and skipped."""
    version = get_version(template.active_version_id) if template.active_version_id else None
    if version is None:
        raise InvalidInput(f"Template {template.name} has no active version to update to.")
    outcomes = []
    for workspace, build in outdated_workspaces(template):
        reason = _skip_reason(actor, version, workspace, build)
        if reason:
            outcomes.append(_outcome(workspace, build, reason))
            continue
        try:
            job = queue_build(actor, workspace, "start", {}, version.id, previous=build, priority=PRIORITY_LOW)
            db.session.commit()
        except (DomainError, IntegrityError) as error:
            db.session.rollback()
            refusal = error.message if isinstance(error, DomainError) else "a build started meanwhile"
            outcomes.append(_outcome(workspace, build, refusal))
            continue
        dispatch(job)
        outcomes.append(_outcome(workspace, build, "", build_for_job(job).id))
    _record(template, "update_all", outcomes)
    db.session.commit()
    return outcomes


def _record(template: Template, field: str, outcomes: Sequence[UpdateOutcome]) -> None:
    summary = {
        "to_version": template.active_version_id,
        **{kind: [item.name for item in outcomes if item.outcome == kind] for kind in (QUEUED, SKIPPED)},
    }
    record("template", template.id, template.name, ACTION_WRITE, {field: change(summary)})


# Notify owners: each owner of an outdated workspace is told once per workspace and active version.


@dataclass(frozen=True)
class NotifyResult:
    notified: list[str]
    # Told about this version already (a repeat sends nothing new), or not wanting such notifications.
    unchanged: list[str]


def notify_outdated_owners(template: Template, version_name: str) -> NotifyResult:
    notified: list[str] = []
    unchanged: list[str] = []
    for workspace, _build in outdated_workspaces(template):
        sent = notifications.notify(
            workspace.owner_id,
            notifications.WORKSPACE_OUTDATED,
            title=f"Update {workspace.name}: {template.name} has a new version",
            body=f"{workspace.name} runs an older version of {template.name}; its active version is "
            f"{version_name}. Update it from its page when it suits you.",
            link=f"/workspaces/{workspace.id}",
            workspace_id=workspace.id,
            dedupe_key=f"outdated:{workspace.id}:{template.active_version_id}",
        )
        (notified if sent is not None else unchanged).append(workspace.name)
    record(
        "template", template.id, template.name, ACTION_WRITE,
        {"notify_outdated": change({"to_version": template.active_version_id, "notified": notified})},
    )  # fmt: skip
    db.session.commit()
    return NotifyResult(notified, unchanged)
