"""Coder's workspace filter (``?q=``): ``owner:me template:docker status:running outdated:true name:dev``.

A bare word is ``name:`` (app/core/filters.py reads the terms). Every term narrows the list, and each is said in
SQL, so that a filtered list pages and counts like any other. Shared by the API and the dashboard's search box.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ColumnElement, Select, exists, false, func, select

from app.catalog.models import Template
from app.core.filters import Orders, one_of, ordered, parse_terms, true_or_false
from app.provisioning.models import JOB_STATUSES, RUNNING, SUCCEEDED, ProvisionerJob
from app.users.models import PREBUILDS_USER_ID, PREBUILDS_USERNAME, User
from app.workspaces.models import Workspace, WorkspaceBuild
from app.workspaces.services import DONE, IN_PROGRESS

# A workspace's status is its latest build's job status read through the build's transition (services.status_for):
# a running or succeeded job shows as its transition's word.
READ_THROUGH = (RUNNING, SUCCEEDED)
STATUSES = (*DONE.values(), *IN_PROGRESS.values(), *(status for status in JOB_STATUSES if status not in READ_THROUGH))


@dataclass(frozen=True)
class WorkspaceFilter:
    owner: str | None = None
    template: str | None = None
    status: str | None = None
    outdated: bool | None = None
    name: str | None = None


def parse_filter(text: str) -> WorkspaceFilter:
    """The filter a ``q=`` says; a term it cannot read is a 400 that says what it takes."""
    terms = parse_terms(text, _EXAMPLES)
    return WorkspaceFilter(
        owner=terms.get("owner"),
        template=terms.get("template"),
        status=one_of(terms, "status", STATUSES),
        outdated=true_or_false(terms, "outdated"),
        name=terms.get("name"),
    )


# ?sort= → the columns; "-" reads it the other way (the newest first). By name the index (name_key, id) serves it.
SORTS: Orders = {
    "name": (Workspace.name_key, Workspace.id),
    "-name": (Workspace.name_key.desc(), Workspace.id),
    "created": (Workspace.created_at, Workspace.id),
    "-created": (Workspace.created_at.desc(), Workspace.id),
    # Never used counts as longest ago, on both databases (they put NULLs at different ends by default).
    "last_used": (Workspace.last_used_at.asc().nulls_first(), Workspace.id),
    "-last_used": (Workspace.last_used_at.desc().nulls_last(), Workspace.id),
}

_EXAMPLES = {"owner": "me", "template": "docker", "status": "running", "outdated": "true", "name": "dev"}


def searched(query: Select[Workspace], text: str, user: User) -> Select[Workspace]:
    """``query`` (of workspaces) narrowed by the filter ``text`` says; all of it when ``text`` is blank (but for
    prebuilt workspaces, which only ``owner:prebuilds`` lists)."""
    return filtered(query, parse_filter(text) if text.strip() else WorkspaceFilter(), user)


def sorted_workspaces(query: Select[Workspace], sort: str) -> Select[Workspace]:
    """``query`` in the order ``sort`` names (by name when blank); an unknown one is a 400 listing them."""
    return ordered(query, sort, SORTS, "name")


def filtered(query: Select[Workspace], wanted: WorkspaceFilter, user: User) -> Select[Workspace]:
    """``query`` (of workspaces) narrowed to what ``wanted`` says; ``owner:me`` is ``user``."""
    query = _prebuilds_if_named(query, wanted.owner, user)
    if wanted.owner is not None:
        if wanted.owner.lower() == "me":
            query = query.where(Workspace.owner_id == user.id)
        else:
            owners = select(User.id).where(func.lower(User.username) == wanted.owner.lower())
            query = query.where(Workspace.owner_id.in_(owners))
    if wanted.template is not None:
        query = query.where(Workspace.template_id.in_(select(Template.id).where(Template.name == wanted.template)))
    if wanted.name is not None:
        query = query.where(Workspace.name_key.contains(wanted.name.lower(), autoescape=True))
    if wanted.status is not None:
        query = query.where(_latest_build_where(_status_is(wanted.status)))
    if wanted.outdated is not None:
        active = (
            select(Template.active_version_id)
            .where(Template.id == Workspace.template_id)
            .correlate(Workspace)  # the listed workspace, two levels out
            .scalar_subquery()
        )
        outdated = _latest_build_where(WorkspaceBuild.template_version_id != active)
        query = query.where(outdated if wanted.outdated else ~outdated)
    return query


def _prebuilds_if_named(query: Select[Workspace], owner: str | None, user: User) -> Select[Workspace]:
    """Prebuilt workspaces are nobody's yet: lists leave them out unless the filter names their owner, and then
    only for owners and template admins (as Coder's ``owner:prebuilds``); to anyone else that list is empty."""
    if owner is None or owner.lower() != PREBUILDS_USERNAME:
        return query.where(Workspace.owner_id != PREBUILDS_USER_ID)
    return query if user.is_template_admin else query.where(false())


def _latest_build_where(condition: ColumnElement[bool]) -> ColumnElement[bool]:
    """The workspace's latest build (a WorkspaceBuild, joined with its ProvisionerJob) meets ``condition``."""
    return exists(
        select(WorkspaceBuild.id)
        .join(ProvisionerJob, ProvisionerJob.id == WorkspaceBuild.job_id)
        .where(WorkspaceBuild.id == Workspace.latest_build_id, condition)
    )


def _status_is(status: str) -> ColumnElement[bool]:
    for transitions, job_status in ((DONE, SUCCEEDED), (IN_PROGRESS, RUNNING)):
        for transition, shown in transitions.items():
            if shown == status:
                return (WorkspaceBuild.transition == transition) & ProvisionerJob.status_in([job_status])
    return ProvisionerJob.status_in([status])
