"""Per-person workspace limits (beyond Coder): a template's "at most N workspaces per person" and the deployment's
``--max-workspaces-per-person``, checked when a workspace is created (app/workspaces/services.py calls
``check_create`` once). Deleted workspaces do not count; a workspace being deleted still does until it is gone."""

from __future__ import annotations

from flask import current_app
from sqlalchemy import func, select

from app.catalog.models import Template
from app.core.config import Settings
from app.core.errors import Forbidden
from app.core.extensions import db
from app.users.models import User
from app.workspaces.models import Workspace


def deployment_limit() -> int:
    settings: Settings = current_app.config["SLIPWAY_SETTINGS"]
    return settings.max_workspaces_per_person


def check_create(owner: User, template: Template) -> None:
    """Refuse (403, saying which limit and how many they have) a workspace that would take ``owner`` past either
    limit. The owner's row is locked first (PostgreSQL), so two creates at once by one person cannot both pass on
    the last free place; SQLite serialises writers anyway."""
    template_limit, overall = template.max_workspaces_per_person, deployment_limit()
    if not template_limit and not overall:
        return
    db.session.execute(select(User.id).where(User.id == owner.id).with_for_update())
    live = Workspace.owner_id == owner.id, Workspace.deleted.is_(False)
    if overall:
        count = db.session.scalar(select(func.count(Workspace.id)).where(*live)) or 0
        if count >= overall:
            raise Forbidden(
                f"{owner.username} has {count} workspace{'' if count == 1 else 's'}: this deployment allows at most "
                f"{overall} per person. Delete one to create another."
            )
    if template_limit:
        count = (
            db.session.scalar(select(func.count(Workspace.id)).where(*live, Workspace.template_id == template.id)) or 0
        )
        if count >= template_limit:
            raise Forbidden(
                f"{owner.username} has {count} workspace{'' if count == 1 else 's'} of template {template.name}: it "
                f"allows at most {template_limit} per person. Delete one to create another."
            )
