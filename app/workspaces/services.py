"""Workspaces and their builds. Each build is a provisioner job; the workspace's status follows its latest build."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from sqlalchemy import Select, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import joinedload, selectinload, undefer

from app.catalog import access as template_access
from app.catalog.models import Template, TemplateVersion
from app.catalog.presets import with_preset
from app.catalog.services import get_template_for, get_version
from app.core.columns import new_id, utcnow
from app.core.errors import Conflict, Forbidden, InvalidInput, NotFound
from app.core.extensions import db
from app.core.validation import USERNAME_PATTERN
from app.events.notices import publish_agent_recheck
from app.externalauth import services as external_auth
from app.groups.models import ACL_ADMIN
from app.provisioning.jobs import confirm_job, dispatch, new_job
from app.provisioning.models import DEBUG_LOGGING, FAILED, SUCCEEDED, ProvisionerJob
from app.users.models import User
from app.workspaces import claims, limits, schedule_rules, sharing
from app.workspaces.models import REASON_INITIATOR, TRANSITIONS, Workspace, WorkspaceBuild
from app.workspaces.parameters import resolve_parameters
from protocol.codec import JSON, JsonObject
from protocol.provisionerd import JOB_WORKSPACE_BUILD, NameValue
from protocol.tags import PRIORITY_HIGH, PRIORITY_LOW, TagError, normalise_tags, render_tag_template

IN_PROGRESS = {"start": "starting", "stop": "stopping", "delete": "deleting"}
DONE = {"start": "running", "stop": "stopped", "delete": "deleted"}
_REQUIRES_ACTIVE = (
    "Template {name} requires its active version: build without choosing a version, or ask a template admin."
)


def build_status(build: WorkspaceBuild) -> str:
    return status_for(build.job.status, build.transition)


def status_for(job_status: str, transition: str) -> str:
    """Reference §2.2: a build's job status read through its transition (a started build is "running")."""
    if job_status == "running":
        return IN_PROGRESS[transition]
    if job_status == SUCCEEDED:
        return DONE[transition]
    return job_status


def is_outdated(workspace: Workspace, latest: WorkspaceBuild) -> bool:
    """Its latest build used another version than the template's active one (reference §2.1)."""
    active = workspace.template.active_version_id
    return active is not None and latest.template_version_id != active


def check_workspace_name(name: str) -> str:
    name = name.strip()
    if not 1 <= len(name) <= 32 or not USERNAME_PATTERN.match(name):
        raise InvalidInput(
            "Invalid workspace name.",
            validations=[{"field": "name", "detail": "Use 1-32 letters, digits and single hyphens."}],
        )
    return name


# What a caller needs of a workspace: ``read`` it (its page, builds, logs), ``use`` it (connect in every way: SSH,
# terminal, apps, port forwards), ``act`` on it as its admin (parameters, schedule, delete), ``start_stop`` it as it
# is (those who use it, and its template's admins) or ``build`` it any way (those who act on it, and its template's
# admins). ``share`` is changing whom it is shared with: its owner's (and deployment owners') alone, so that a share
# never hands on more sharing.
WorkspaceNeed = Literal["read", "use", "act", "share", "build", "start_stop"]


def can_read(user: User, workspace: Workspace) -> bool:
    """Its owner, owners and template admins, the admins of its template (who look after its workspaces), and
    whoever it is shared with."""
    if workspace.owner_id == user.id or user.is_template_admin or user.is_auditor:
        return True
    return sharing.share_role(user, workspace) is not None or template_access.may(user, workspace.template, "admin")


def can_use(user: User, workspace: Workspace) -> bool:
    """Connect to it, start and stop it: whoever may act on it, and whoever it is shared with (``use``): the one
    rule of every way in (app/agents/access.py, app/agents/apps.py), re-checked when a share is removed. Not its
    template's admins: they manage its builds, not the workspace (no terminal, no apps)."""
    if workspace.owner_id == user.id or user.is_owner:
        return True
    return sharing.share_role(user, workspace) is not None


def can_act(user: User, workspace: Workspace) -> bool:
    """Everything its owner may do: its owner, deployment owners, and those it is shared with as ``admin``."""
    if workspace.owner_id == user.id or user.is_owner:
        return True
    return sharing.share_role(user, workspace) == ACL_ADMIN


def can_share(user: User, workspace: Workspace) -> bool:
    return workspace.owner_id == user.id or user.is_owner


def can_build(user: User, workspace: Workspace) -> bool:
    """Build it any way (start, stop, delete, new parameters or version): who may act on it, and its template's own
    admins (they manage its workspaces' builds, not the workspaces themselves: no terminal, no apps)."""
    return can_act(user, workspace) or (
        not user.is_template_admin and template_access.may(user, workspace.template, "admin")
    )


def can_start_stop(user: User, workspace: Workspace) -> bool:
    """Start or stop it as it is: who may use it (a share to ``use``) or build it."""
    return can_use(user, workspace) or can_build(user, workspace)


def build_need(transition: str, parameters: Mapping[str, str], version_id: str | None) -> WorkspaceNeed:
    """A start or stop with what the workspace already has is ``start_stop``; a delete, new parameter values or
    another version is ``build``."""
    if transition in ("start", "stop") and not parameters and version_id is None:
        return "start_stop"
    return "build"


_NEED_CHECKS = {
    "use": can_use,
    "act": can_act,
    "share": can_share,
    "build": can_build,
    "start_stop": can_start_stop,
}
_REFUSALS = {
    "use": "Only the workspace's owner, a deployment owner or those it is shared with may do that.",
    "act": "Only the workspace's owner, a deployment owner or those it is shared with as admin may do that.",
    "share": "Only the workspace's owner (or a deployment owner) may change whom it is shared with.",
    "build": "Only the workspace's owner, a deployment owner, those it is shared with as admin or its template's "
    "admins may build it that way.",
    "start_stop": "Only the workspace's owner, a deployment owner, those it is shared with or its template's admins "
    "may start or stop it.",
}


def get_workspace_for(user: User, workspace_id: str, need: WorkspaceNeed = "read") -> Workspace:
    """The workspace, if this user may ``read`` it or has the ``need``; whoever may not even read it gets 404 (it
    may as well not exist), whoever may read it but not more gets 403 saying who may."""
    workspace = db.session.get(Workspace, workspace_id)
    if workspace is None or workspace.deleted or not can_read(user, workspace):
        raise NotFound("No such workspace.")
    if need != "read" and not _NEED_CHECKS[need](user, workspace):
        raise Forbidden(_REFUSALS[need])
    return workspace


def get_build_for(user: User, build_id: str) -> WorkspaceBuild:
    build = db.session.get(WorkspaceBuild, build_id)
    if build is None or not can_read(user, build.workspace):
        raise NotFound("No such workspace build.")
    return build


def visible_workspaces(user: User, *, only_mine: bool = False, name: str | None = None) -> list[Workspace]:
    return list(db.session.scalars(visible_workspaces_query(user, only_mine=only_mine, name=name)))


def visible_workspaces_query(user: User, *, only_mine: bool = False, name: str | None = None) -> Select[Workspace]:
    """The workspaces ``user`` may see, by name (then id, so that pages never overlap)."""
    query = (
        select(Workspace)
        .where(Workspace.deleted.is_(False))
        .options(joinedload(Workspace.owner), joinedload(Workspace.template))
        .order_by(Workspace.name_key, Workspace.id)
    )
    if only_mine:
        query = query.where(Workspace.owner_id == user.id)
    elif not (user.is_template_admin or user.is_auditor):
        # Theirs, those shared with them (directly or through a group), and the workspaces of the templates they
        # administer: one statement whatever their groups. Arms of ids rather than an OR, which would read every
        # workspace in name order to test each: each arm reads its own index (empty for most people).
        administered = select(Template.id).where(template_access.template_filter(user, "admin"))
        theirs = select(Workspace.id).where(Workspace.owner_id == user.id)
        shared = select(Workspace.id).where(sharing.shared_with(user))
        looked_after = select(Workspace.id).where(Workspace.template_id.in_(administered))
        query = query.where(Workspace.id.in_(theirs.union_all(shared, looked_after)))
    if name is not None:
        query = query.where(Workspace.name_key == name.lower())
    return query


def latest_builds(workspaces: Sequence[Workspace], *, with_state: bool = False) -> dict[str, WorkspaceBuild]:
    """Each workspace's latest build (with its job and version, and its Terraform state when the caller is about to
    queue the next build), in one query whatever the number of workspaces."""
    ids = [workspace.latest_build_id for workspace in workspaces if workspace.latest_build_id is not None]
    if not ids:
        return {}
    query = (
        select(WorkspaceBuild)
        .where(WorkspaceBuild.id.in_(ids))
        # Versions are few and shared (a template's active one): joined, each would be decoded again on every row.
        .options(joinedload(WorkspaceBuild.job), selectinload(WorkspaceBuild.template_version))
    )
    if with_state:
        query = query.options(undefer(WorkspaceBuild.state))
    return {build.workspace_id: build for build in db.session.scalars(query)}


def versions_in_use() -> Select[str, str]:
    """Every workspace there is (``owner/name`` as ``workspace``), by the ``template_version_id`` of its latest
    build: the versions whose archives must stay, since stopping or deleting a workspace builds its version."""
    return (
        select(
            WorkspaceBuild.template_version_id.label("template_version_id"),
            (User.username + "/" + Workspace.name).label("workspace"),
        )
        .join(Workspace, Workspace.latest_build_id == WorkspaceBuild.id)
        .join(User, User.id == Workspace.owner_id)
        .where(Workspace.deleted.is_(False))
    )


def latest_build(workspace: Workspace) -> WorkspaceBuild:
    build = db.session.get(WorkspaceBuild, workspace.latest_build_id) if workspace.latest_build_id else None
    assert build is not None  # noqa: S101 - a workspace is created together with its first build
    return build


def builds_query(workspace: Workspace) -> Select[WorkspaceBuild]:
    """A workspace's builds, newest first (build numbers are unique within a workspace, so pages never overlap)."""
    return (
        select(WorkspaceBuild)
        .where(WorkspaceBuild.workspace_id == workspace.id)
        .options(joinedload(WorkspaceBuild.job), joinedload(WorkspaceBuild.template_version))
        .order_by(WorkspaceBuild.build_number.desc())
    )


def timeline_query(workspace: Workspace) -> Select[WorkspaceBuild]:
    """The workspace page's build timeline: the builds with who queued each (one query for a page of them)."""
    return builds_query(workspace).options(joinedload(WorkspaceBuild.initiator))


def create_workspace(
    owner: User,
    template_id: str,
    name: str,
    parameters: dict[str, str],
    version_id: str | None = None,
    *,
    schedule: Mapping[str, JSON] | None = None,
    preset_id: str | None = None,
) -> Workspace:
    """A new workspace and its first build; ``schedule`` holds the optional autostart_schedule, ttl_ms and
    automatic_updates of the request, checked like the lifecycle API checks them later; ``preset_id`` the version's
    preset whose parameter values it is built with."""
    # A template the owner may not use does not exist for them (404).
    template = get_template_for(owner, template_id)
    if template.deprecation_message:
        raise Forbidden(
            f"Template {template.name} is deprecated and makes no new workspaces: {template.deprecation_message}"
        )
    # The request's own automatic_updates is checked with the rest of its schedule below; only "always" matters here.
    automatic_updates = str((schedule or {}).get("automatic_updates") or "never")
    version_id = version_for_build(owner, template, "start", version_id, automatic_updates=automatic_updates)
    version = _usable_version(template, version_id)
    # Every problem at once (the name, each parameter, each Git provider), so a form can mark every field that
    # needs a change instead of one per submit.
    problems: list[InvalidInput] = []
    name_ok, taken = True, False
    try:
        name = check_workspace_name(name)
    except InvalidInput as error:
        problems.append(error)
        name_ok = False
    if name_ok:
        taken = (
            db.session.scalar(
                select(Workspace.id).where(
                    Workspace.owner_id == owner.id, Workspace.name_key == name.lower(), Workspace.deleted.is_(False)
                )
            )
            is not None
        )
    values: tuple[NameValue, ...] = ()
    try:
        values = resolve_parameters(version.parameters, with_preset(version, preset_id, parameters), previous=None)
    except InvalidInput as error:
        problems.append(error)
    try:
        external_auth.require_links(owner, version.external_auth)
    except InvalidInput as error:
        problems.append(error)
    taken_problem = {"field": "name", "detail": f"You already have a workspace named {name!r}: choose another name."}
    if problems:
        validations = [item for problem in problems for item in problem.validations]
        message = problems[0].message if len(problems) == 1 and not taken else "Some fields are invalid."
        raise InvalidInput(message, validations=validations + ([taken_problem] if taken else []))
    if taken:
        raise Conflict(f"You already have a workspace named {name!r}.", validations=[taken_problem])
    limits.check_create(owner, template)
    # A ready prebuilt workspace of this preset, if there is one, becomes theirs (app/workspaces/claims.py).
    claimed = _claim_prebuild(owner, template, version, preset_id, name, values, schedule)
    if claimed is not None:
        return claimed
    workspace = Workspace(name=name, owner_id=owner.id, template_id=template.id, template=template)
    if schedule:
        schedule_rules.apply_on_create(workspace, schedule)
    db.session.add(workspace)
    try:
        db.session.flush()
    except IntegrityError as exc:
        db.session.rollback()
        raise Conflict(f"You already have a workspace named {name!r}.") from exc
    job = _queue_build(owner, workspace, version, "start", values, state=None, number=1, preset_id=preset_id)
    db.session.commit()
    dispatch(job)
    return workspace


def create_build(
    actor: User,
    workspace: Workspace,
    transition: str,
    parameters: dict[str, str],
    version_id: str | None = None,
    *,
    reason: str = REASON_INITIATOR,
    debug_logging: bool = False,
    preset_id: str | None = None,
) -> WorkspaceBuild:
    try:
        job = queue_build(
            actor, workspace, transition, parameters, version_id,
            reason=reason, debug_logging=debug_logging, preset_id=preset_id,
        )  # fmt: skip
        db.session.commit()
    except IntegrityError as exc:  # two builds raced for the same number
        db.session.rollback()
        raise Conflict("A build of this workspace is already active; wait for it or cancel it.") from exc
    dispatch(job)
    return build_for_job(job)


def delete_workspace(actor: User, workspace: Workspace, typed_name: str) -> WorkspaceBuild:
    """Queue the delete build once the workspace's name has been typed out: a stray click destroys nothing."""
    if typed_name != workspace.name:
        raise InvalidInput(
            f"Type the workspace's name, {workspace.name}, to delete it.",
            validations=[{"field": "name", "detail": f"That is not {workspace.name}: nothing was deleted."}],
        )
    return create_build(actor, workspace, "delete", {})


def queue_build(
    actor: User,
    workspace: Workspace,
    transition: str,
    parameters: dict[str, str],
    version_id: str | None = None,
    *,
    reason: str = REASON_INITIATOR,
    previous: WorkspaceBuild | None = None,
    debug_logging: bool = False,
    preset_id: str | None = None,
    priority: str | None = None,
) -> ProvisionerJob:
    """Add the next build of ``workspace`` to the session (the caller commits, then dispatches the job): every
    check a build must pass, so that a person's click and the lifecycle executor follow the same rules.
    ``previous`` is the workspace's latest build when the caller already loaded it (with its state). A build that
    raced another for the same number raises IntegrityError (here or at commit): the caller rolls back."""
    if transition not in TRANSITIONS:
        raise InvalidInput("transition must be start, stop or delete.")
    previous = previous or latest_build(workspace)
    if previous.job.is_active:
        raise Conflict("A build of this workspace is already active; wait for it or cancel it.")
    if transition == "start" and reason == REASON_INITIATOR:
        # A person may keep, stop and delete a workspace of a template they lost access to, but not start it.
        template_access.require_use_for_build(workspace.owner, workspace.template, actor)
    if transition == "start" and workspace.dormant_at is not None:
        raise InvalidInput(
            "This workspace is dormant: it was unused too long. Activate it first (PUT .../dormant "
            '{"dormant": false}, or "Activate" on its page), then start it.'
        )
    version_id = version_for_build(
        actor, workspace.template, transition, version_id,
        automatic_updates=workspace.automatic_updates, previous_version_id=previous.template_version_id,
    )  # fmt: skip
    version = _usable_version(workspace.template, version_id) if version_id else previous.template_version
    previous_values = {item.name: item.value for item in previous.parameters}
    parameters = with_preset(version, preset_id, parameters)
    values = resolve_parameters(version.parameters, parameters, previous=previous_values)
    if transition == "start":
        external_auth.require_links(workspace.owner, version.external_auth)
    job = _queue_build(
        actor, workspace, version, transition, values,
        state=previous.state, number=previous.build_number + 1, reason=reason, debug_logging=debug_logging,
        preset_id=preset_id, priority=priority,
    )  # fmt: skip
    workspace.updated_at = utcnow()
    return job


def version_for_start(actor: User, workspace: Workspace, requested_version_id: str | None) -> str | None:
    """The version a start of ``workspace`` would build (None: the version of its latest build)."""
    return version_for_build(
        actor, workspace.template, "start", requested_version_id, automatic_updates=workspace.automatic_updates
    )


def version_for_build(
    actor: User,
    template: Template,
    transition: str,
    requested_version_id: str | None,
    *,
    automatic_updates: str = "never",
    previous_version_id: str | None = None,
) -> str | None:
    """The version a build builds: the one rule for every build there is (a create's first build, a start, stop or
    delete, a person's or the lifecycle executor's), so that no path escapes the template's policy. None means the
    version of the latest build (on create: the active one).

    A start builds the template's active version when the workspace updates automatically or when the template
    requires it of non-admins. Such a template lets a non-admin build no other version at all: a stop or delete
    runs its version's Terraform too, so it may use the active version or the one the workspace runs, nothing
    else."""
    active = template.active_version_id
    if active is None:
        return requested_version_id
    held = template.require_active_version and not template_access.may(actor, template, "admin")
    if transition != "start":
        if held and requested_version_id not in (None, active, previous_version_id):
            raise Forbidden(_REQUIRES_ACTIVE.format(name=template.name))
        return requested_version_id
    if held:
        if requested_version_id not in (None, active):
            raise Forbidden(_REQUIRES_ACTIVE.format(name=template.name))
        return active
    if automatic_updates == "always" and requested_version_id is None:
        return active
    return requested_version_id


def _usable_version(template: Template, version_id: str | None) -> TemplateVersion:
    version = get_version(version_id) if version_id else None
    if version is None:
        if template.active_version_id is None:
            raise InvalidInput("The template has no active version.")
        version = get_version(template.active_version_id)
    if version.template_id != template.id:
        raise InvalidInput("That version belongs to another template.")
    if version.archived_at is not None:
        raise InvalidInput(f"Template version {version.name} is archived: build from another version.")
    if version.job.status != SUCCEEDED:
        raise InvalidInput(f"That template version's import has not succeeded ({version.job.status}).")
    return version


def _queue_build(
    actor: User, workspace: Workspace, version: TemplateVersion, transition: str,
    values: tuple[NameValue, ...], *, state: bytes | None, number: int, reason: str = REASON_INITIATOR,
    debug_logging: bool = False, preset_id: str | None = None, priority: str | None = None,
) -> ProvisionerJob:  # fmt: skip
    # Builds run where the version was imported, on behalf of the workspace's owner (user-scoped tags), with the
    # tags the template computes from this build's parameters (data "coder_workspace_tags") on top.
    tags = build_tags(version, workspace.owner_id, values)
    # Ids chosen here rather than at flush: the session writes many builds in one batch at commit (the executor).
    build_id = new_id()
    # A person waits for their own builds; the lifecycle executor's (and a bulk update's, which says so) may wait
    # behind them.
    priority = priority or (PRIORITY_HIGH if reason == REASON_INITIATOR else PRIORITY_LOW)
    job_input: JsonObject = {"workspace_build_id": build_id}
    if debug_logging:  # Terraform runs with TF_LOG=debug for this job only (BuildJob.debug_logging)
        job_input[DEBUG_LOGGING] = True
    job = new_job(
        JOB_WORKSPACE_BUILD, organization_id=version.job.organization_id, file_id=version.job.file_id,
        initiator_id=actor.id, tags=tags,
        job_input=job_input, priority=priority,
        required_terraform=version.job.required_terraform,
    )  # fmt: skip
    job.id = new_id()
    build = WorkspaceBuild(
        id=build_id, workspace_id=workspace.id, build_number=number, transition=transition,
        template_version_id=version.id, job=job, initiator_id=actor.id, state=state, parameters=values, reason=reason,
        template_version_preset_id=preset_id or None,
    )  # fmt: skip
    db.session.add(build)
    workspace.latest_build_id = build_id
    return job


def retry_build(actor: User, failed: WorkspaceBuild, *, debug_logging: bool = False) -> WorkspaceBuild:
    """Run a failed build's transition again, from the same template version with the same parameters (the rules
    of any build still apply: a template that requires its active version starts that one). With
    ``debug_logging`` Terraform logs at debug level for the new build only."""
    workspace = failed.workspace
    if not can_act(actor, workspace):
        raise Forbidden("Only the workspace's owner (or a deployment owner) may retry its builds.")
    if failed.job.status != FAILED:
        raise InvalidInput(f"Only a failed build can be retried; this one is {failed.job.status}.")
    if latest_build(workspace).id != failed.id:
        raise Conflict("A newer build of this workspace exists: retry that one, or start a new build.")
    parameters = {item.name: item.value for item in failed.parameters}
    return create_build(
        actor, workspace, failed.transition, parameters, failed.template_version_id, debug_logging=debug_logging
    )


def plan_review(build: WorkspaceBuild) -> JsonObject:
    if build.plan_review is None:
        raise NotFound("This build has no plan to review: only a start or stop that would destroy persistent "
                       "resources stops for confirmation.")  # fmt: skip
    review = dict(build.plan_review)
    review.pop("plan", None)
    return review


def confirm_build(user: User, build: WorkspaceBuild) -> None:
    """The workspace's owner (or a deployment owner) lets a held plan run."""
    if not can_act(user, build.workspace):
        raise Forbidden("Only the workspace's owner (or a deployment owner) may confirm its plan.")
    confirm_job(build.job)


def build_tags(version: TemplateVersion, owner_id: str, values: Sequence[NameValue]) -> dict[str, str]:
    """The tags of a build of ``version`` with these parameter values: the version's own, and the ones its
    coder_workspace_tags compute from the values, evaluated here, before anything is queued."""
    parameters = {item.name: item.value for item in values}
    computed = {key: render_tag_template(template, parameters) for key, template in version.workspace_tags.items()}
    try:
        return normalise_tags({**version.job.tags, **computed}, owner_id)
    except TagError as exc:
        raise InvalidInput(f"The template's coder_workspace_tags give an invalid tag: {exc}") from exc


def build_for_job(job: ProvisionerJob) -> WorkspaceBuild:
    build: WorkspaceBuild | None = db.session.scalar(select(WorkspaceBuild).where(WorkspaceBuild.job_id == job.id))
    if build is None:
        raise NotFound("The job's workspace build is gone.")
    return build


def queue_prebuild(
    owner: User, template: Template, version: TemplateVersion, preset_id: str, name: str, *, priority: str
) -> ProvisionerJob:
    """A new prebuilt workspace of ``owner`` (the ``prebuilds`` system user) and its first build, with the preset's
    values and the version's defaults, added to the session (the reconciler commits and dispatches). Not
    :func:`create_workspace`: nobody's access, name or Git links are checked for a system user, and its builds
    wait behind people's (``priority``)."""
    values = resolve_parameters(version.parameters, with_preset(version, preset_id, {}), previous=None)
    workspace = Workspace(
        name=check_workspace_name(name), owner_id=owner.id, template_id=template.id, template=template
    )
    db.session.add(workspace)
    db.session.flush()
    return _queue_build(
        owner, workspace, version, "start", values, state=None, number=1, preset_id=preset_id, priority=priority
    )


def _claim_prebuild(
    owner: User, template: Template, version: TemplateVersion, preset_id: str | None, name: str,
    values: tuple[NameValue, ...], schedule: Mapping[str, JSON] | None,
) -> Workspace | None:  # fmt: skip
    """Claim a ready prebuild for ``owner`` and queue its start build with them as its owner (so that the template
    sees who owns it); None when there is none (the caller builds as usual)."""
    try:
        workspace = claims.claim_for(owner, template, version, preset_id, name, values)
    except IntegrityError as exc:  # the person created a workspace of that name meanwhile
        db.session.rollback()
        raise Conflict(f"You already have a workspace named {name!r}.") from exc
    if workspace is None:
        return None
    if schedule:
        schedule_rules.apply_on_create(workspace, schedule)
    previous = latest_build(workspace)
    job = _queue_build(
        owner, workspace, version, "start", values,
        state=previous.state, number=previous.build_number + 1, preset_id=preset_id,
    )  # fmt: skip
    db.session.commit()
    dispatch(job)
    for agent in claims.build_agents(previous):  # their connections wait for the build, to hand the new tokens over
        publish_agent_recheck(agent.id)
    return workspace
