"""Keeping a template tidy: deleting it once no workspace uses it, and archiving and unarchiving its versions
(one at a time, or every failed or unused one at once, as ``coder templates archive`` does)."""

from __future__ import annotations

from sqlalchemy import select, update

from app.catalog.models import Template, TemplateVersion
from app.catalog.storage import versions_in_use
from app.core.columns import utcnow
from app.core.errors import Conflict
from app.core.extensions import db

# Named in an error, at most this many workspaces (then "…").
NAMES_SHOWN = 5


def workspaces_on(template: Template) -> list[str]:
    """ "owner/name" of (up to one more than :data:`NAMES_SHOWN`) workspaces on a version of ``template``."""
    in_use = versions_in_use().subquery()
    return list(
        db.session.scalars(
            select(in_use.c.workspace)
            .join(TemplateVersion, TemplateVersion.id == in_use.c.template_version_id)
            .where(TemplateVersion.template_id == template.id)
            .order_by(in_use.c.workspace)
            .limit(NAMES_SHOWN + 1)
        )
    )


def delete_template(template: Template) -> None:
    """Delete a template no workspace uses (409 naming them otherwise). Its row stays, under a name nobody can
    type (so the name is free again), for the history of deleted workspaces; its versions are archived, so their
    archives stop counting against anyone's storage and are freed by the maintenance loop."""
    workspaces = workspaces_on(template)
    if workspaces:
        names = ", ".join(workspaces[:NAMES_SHOWN]) + (", …" if len(workspaces) > NAMES_SHOWN else "")
        raise Conflict(
            f"Template {template.name} is used by workspaces ({names}): delete them first, or deprecate the "
            "template so no new ones are made."
        )
    now = utcnow()
    db.session.execute(
        update(TemplateVersion)
        .where(TemplateVersion.template_id == template.id, TemplateVersion.archived_at.is_(None))
        .values(archived_at=now)
        .execution_options(synchronize_session=False)
    )
    template.display_name = template.display_name or template.name
    template.name = "~" + template.id.replace("-", "")[:31]  # "~" is never part of a template name
    template.deleted_at = now
    db.session.commit()
