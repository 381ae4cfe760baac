"""Workspace quotas, as Coder's: a person's budget is the sum of the ``quota_allowance`` of their groups (the
Everyone group of their organisation included); what they consume is the ``daily_cost`` (coder_metadata's field) of
the resources of each of their workspaces' latest build: every resource of a started workspace, only the persistent
ones of a stopped workspace (a stop's state holds only what survives it: a home volume, not the container).

Quotas are on once any group sets an allowance above 0; until then nobody has a budget to be held to, and a
deployment that never heard of quotas builds as before (Coder gets the same effect from its licence switch: with it
off, no CommitQuota call refuses a build).

Prebuilt workspaces (owned by the system user ``prebuilds``) never count against anyone's budget: their template's
``prebuild_budget`` holds them until a person claims one, which then becomes theirs and counts for them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sqlalchemy import func, or_, select

from app.catalog.models import Template
from app.core.extensions import db
from app.groups.models import Group, GroupMember
from app.groups.services import group_ids_of
from app.organizations.models import OrganizationMember
from app.provisioning.models import ProvisionerJob
from app.resources.models import WorkspaceResource
from app.users.models import PREBUILDS_USER_ID, User
from app.workspaces.models import Workspace, WorkspaceBuild


@dataclass(frozen=True)
class WorkspaceCost:
    workspace_id: str
    name: str
    daily_cost: int


@dataclass(frozen=True)
class Quota:
    budget: int
    consumed: int
    workspaces: tuple[WorkspaceCost, ...]  # those that cost something, dearest first
    enabled: bool

    def to_json(self) -> dict[str, int]:
        # Coder's WorkspaceQuota.
        return {"credits_consumed": self.consumed, "budget": self.budget}


def quotas_enabled() -> bool:
    return db.session.scalar(select(Group.id).where(Group.quota_allowance > 0).limit(1)) is not None


def applies_to(user: User, template: Template) -> bool:
    """Whether a build of ``user``'s workspace of ``template`` must fit a budget (checked by the daemon between plan
    and apply): a person's once quotas are on; a prebuild's when its template sets a prebuild_budget."""
    if user.id == PREBUILDS_USER_ID:
        return template.prebuild_budget > 0
    return quotas_enabled()


def budget_of(user: User) -> int:
    total = db.session.scalar(
        select(func.coalesce(func.sum(Group.quota_allowance), 0)).where(Group.id.in_(group_ids_of(user.id)))
    )
    return int(total or 0)


def workspace_costs(owner_id: str) -> list[WorkspaceCost]:
    """The daily cost of each of ``owner_id``'s workspaces (not deleted) that costs something, dearest first."""
    return workspace_costs_of([owner_id]).get(owner_id, [])


def workspace_costs_of(owner_ids: Sequence[str]) -> dict[str, list[WorkspaceCost]]:
    """The same for several people, in one query."""
    cost = func.sum(WorkspaceResource.daily_cost)
    rows = db.session.execute(
        select(Workspace.owner_id, Workspace.id, Workspace.name, cost)
        .join(WorkspaceBuild, WorkspaceBuild.id == Workspace.latest_build_id)
        .join(
            WorkspaceResource,
            (WorkspaceResource.job_id == WorkspaceBuild.job_id)
            & (WorkspaceResource.transition == WorkspaceBuild.transition),
        )
        .where(
            Workspace.owner_id.in_(list(owner_ids)),
            Workspace.deleted.is_(False),
            WorkspaceBuild.transition != "delete",
            or_(WorkspaceBuild.transition == "start", WorkspaceResource.lifecycle == "persistent"),
        )
        .group_by(Workspace.owner_id, Workspace.id, Workspace.name)
        .having(cost > 0)
    ).all()
    # A build still running has no resources recorded yet: what its quota check accepted counts until it ends.
    running = db.session.execute(
        select(Workspace.owner_id, Workspace.id, Workspace.name, WorkspaceBuild.daily_cost)
        .join(WorkspaceBuild, WorkspaceBuild.id == Workspace.latest_build_id)
        .join(ProvisionerJob, ProvisionerJob.id == WorkspaceBuild.job_id)
        .where(
            Workspace.owner_id.in_(list(owner_ids)),
            Workspace.deleted.is_(False),
            ProvisionerJob.completed_at.is_(None),
            WorkspaceBuild.daily_cost > 0,
        )
    ).all()
    costs: dict[str, list[WorkspaceCost]] = {}
    for owner_id, workspace_id, name, total in [*rows, *running]:
        costs.setdefault(owner_id, []).append(WorkspaceCost(workspace_id, name, int(total or 0)))
    for items in costs.values():
        items.sort(key=lambda item: (-item.daily_cost, item.name))
    return costs


def quota_of(user: User) -> Quota:
    if user.id == PREBUILDS_USER_ID:  # prebuilds answer to their templates' prebuild_budget instead
        return Quota(budget=0, consumed=0, workspaces=(), enabled=False)
    costs = workspace_costs(user.id)
    return Quota(
        budget=budget_of(user),
        consumed=sum(item.daily_cost for item in costs),
        workspaces=tuple(costs),
        enabled=quotas_enabled(),
    )


def quotas_of_users(user_ids: Sequence[str]) -> dict[str, Quota]:
    """Each person's quota, for a page of people (the users admin page): a fixed number of queries, whatever their
    number. Empty while quotas are off."""
    if not user_ids or not quotas_enabled():
        return {}
    ids = list(user_ids)
    budgets: dict[str, int] = {user_id: 0 for user_id in ids}
    from_groups = select(GroupMember.user_id, func.sum(Group.quota_allowance)).join(
        Group, Group.id == GroupMember.group_id
    )
    # The Everyone group's id is its organisation's: membership of the organisation is membership of it.
    from_everyone = select(OrganizationMember.user_id, func.sum(Group.quota_allowance)).join(
        Group, Group.id == OrganizationMember.organization_id
    )
    for query, who in ((from_groups, GroupMember.user_id), (from_everyone, OrganizationMember.user_id)):
        for user_id, total in db.session.execute(query.where(who.in_(ids)).group_by(who)):
            budgets[user_id] += int(total or 0)
    costs = workspace_costs_of(ids)
    return {
        user_id: Quota(
            budget=budgets[user_id],
            consumed=sum(item.daily_cost for item in costs.get(user_id, [])),
            workspaces=tuple(costs.get(user_id, [])),
            enabled=True,
        )
        for user_id in ids
    }


def refusal(user: User, quota: Quota, build_cost: int, workspace_name: str) -> str:
    """Why a build that would cost ``build_cost`` a day is refused: the budget, the use and what costs what."""
    dearest = ", ".join(f"{item.name} {item.daily_cost}" for item in quota.workspaces) or "none"
    return (
        f"This build of {workspace_name} would cost {build_cost} a day and take {user.username} over their quota: "
        f"budget {quota.budget}, in use {quota.consumed} (workspaces: {dearest}). Stop or delete a workspace, or "
        "ask an admin for a larger allowance."
    )


def over_budget(user: User, workspace_id: str, build_cost: int) -> str | None:
    """The refusal when a build of ``workspace_id`` costing ``build_cost`` a day would take ``user`` past their
    budget (its own current cost is replaced by the new one, so a build that costs less always passes), else None.
    The caller records the accepted cost on the build and commits, which releases the owner's row for the next."""
    # One check at a time per person (PostgreSQL; SQLite serialises writers anyway): the daemon's answer commits.
    db.session.execute(select(User.id).where(User.id == user.id).with_for_update())
    quota = quota_of(user)
    if not quota.enabled:
        return None
    current = next((item.daily_cost for item in quota.workspaces if item.workspace_id == workspace_id), 0)
    if build_cost <= current or quota.consumed - current + build_cost <= quota.budget:
        return None
    name = db.session.scalar(select(Workspace.name).where(Workspace.id == workspace_id)) or workspace_id
    return refusal(user, quota, build_cost, name)


def prebuild_costs(owner: User, template: Template) -> list[WorkspaceCost]:
    """What each prebuilt workspace of ``template`` (owned by ``owner``, the prebuilds user) costs a day."""
    ids = set(db.session.scalars(select(Workspace.id).where(Workspace.template_id == template.id)))
    return [item for item in workspace_costs(owner.id) if item.workspace_id in ids]


def check_build(owner: User, template: Template, workspace_id: str, build_cost: int) -> str | None:
    """The daemon's question for a start under a budget: a person's quota, or the template's prebuild_budget for
    a prebuild (its cost never touches a person's until it is claimed)."""
    if owner.id != PREBUILDS_USER_ID:
        return over_budget(owner, workspace_id, build_cost)
    if template.prebuild_budget <= 0:
        return None
    db.session.execute(select(Template.id).where(Template.id == template.id).with_for_update())
    costs = prebuild_costs(owner, template)
    consumed = sum(item.daily_cost for item in costs)
    current = next((item.daily_cost for item in costs if item.workspace_id == workspace_id), 0)
    if build_cost <= current or consumed - current + build_cost <= template.prebuild_budget:
        return None
    dearest = ", ".join(f"{item.name} {item.daily_cost}" for item in costs) or "none"
    return (
        f"This prebuild would cost {build_cost} a day and take the prebuilds of template {template.name} over their "
        f"budget: prebuild_budget {template.prebuild_budget}, in use {consumed} (workspaces: {dearest})."
    )
