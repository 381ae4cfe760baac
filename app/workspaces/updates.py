"""What promoting a template version would do to the workspaces on the template: how many it leaves outdated,
and which of them could not update without new parameter values (their stored values checked against the new
version's rules, as the update itself will check them)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import joinedload

from app.catalog.models import TemplateVersion
from app.core.errors import InvalidInput
from app.core.extensions import db
from app.workspaces.models import Workspace
from app.workspaces.parameters import resolve_parameters
from app.workspaces.services import latest_builds
from protocol.codec import JSON, JsonObject


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
        stored = {value.name: value.value for value in build.parameters}
        try:
            resolve_parameters(version.parameters, {}, previous=stored)
            needs: list[JSON] = []
        except InvalidInput as exc:
            needs = [*sorted({item["field"] for item in exc.validations})]
        affected.append(
            {
                "id": workspace.id,
                "name": workspace.name,
                "owner_name": workspace.owner.username,
                "needs_parameters": needs,
            }
        )
    return {"outdated_count": len(affected), "workspaces": affected}
