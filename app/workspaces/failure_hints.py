"""What a failed build's person can do about it: the parameters changed since the workspace's last good build that
the failing resource uses, and whether changing them again (rather than retrying) is the likely fix.

A failure that follows a parameter change is most often that change: retrying builds the same values and fails the
same way. Read only for a failed build's own page and its workspace's page (two queries, and the template's HCL only
when a parameter changed), never for lists.
"""

from __future__ import annotations

import dataclasses

from sqlalchemy import select

from app.catalog.references import resource_parameters
from app.core.extensions import db
from app.provisioning.models import SUCCEEDED, ProvisionerJob
from app.workspaces.models import WorkspaceBuild
from protocol.logs import ChangedParameter, FailureCause

CHANGE_PARAMETERS = "change_parameters"
RETRY = "retry"
START = "start"


def last_good_build(build: WorkspaceBuild) -> WorkspaceBuild | None:
    """The workspace's latest start before ``build`` that succeeded: the parameters it built with worked."""
    query = (
        select(WorkspaceBuild)
        .join(ProvisionerJob, ProvisionerJob.id == WorkspaceBuild.job_id)
        .where(
            WorkspaceBuild.workspace_id == build.workspace_id,
            WorkspaceBuild.build_number < build.build_number,
            WorkspaceBuild.transition == START,
            ProvisionerJob.status == SUCCEEDED,
        )
        .order_by(WorkspaceBuild.build_number.desc())
        .limit(1)
    )
    return db.session.scalars(query).first()


def changed_parameters(build: WorkspaceBuild, good: WorkspaceBuild) -> list[ChangedParameter]:
    """The parameters whose values differ between the good build and ``build``, in the template's order; an
    ephemeral one's values are never shown (it is asked for each build, and kept by none)."""
    before = {item.name: item.value for item in good.parameters}
    after = {item.name: item.value for item in build.parameters}
    declared = sorted(enumerate(build.template_version.parameters), key=lambda pair: (pair[1].order, pair[0]))
    changed = []
    for _, parameter in declared:
        if parameter.ephemeral or after.get(parameter.name, "") == before.get(parameter.name, ""):
            continue
        changed.append(
            ChangedParameter(
                name=parameter.name,
                label=parameter.display_name or parameter.name,
                previous=before.get(parameter.name, ""),
                value=after.get(parameter.name, ""),
                mutable=parameter.mutable,
            )
        )
    return changed


def explain(build: WorkspaceBuild, cause: FailureCause | None) -> FailureCause | None:
    """``cause`` with the parameters it likely comes from and the likely fix; None when the build did not fail."""
    if cause is None:
        return None
    good = last_good_build(build)
    changed = changed_parameters(build, good) if good is not None else []
    used = (
        resource_parameters(build.template_version.job.file_id, cause.resource) if changed and cause.resource else None
    )
    if used is not None:
        implicated = [parameter for parameter in changed if parameter.name in used.names]
        if implicated or used.complete:
            changed, exact = implicated, True
        else:  # it uses none of them directly, but may through what else it reads: say only that they changed
            exact = False
    else:
        exact = False
    fix = CHANGE_PARAMETERS if any(parameter.mutable for parameter in changed) else RETRY
    return dataclasses.replace(cause, changed_parameters=tuple(changed), parameters_used=exact, likely_fix=fix)
