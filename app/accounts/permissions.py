"""What a person may do: the answers the dashboard and clients ask for before showing an action (Coder's
``POST /authcheck``, and ``GET /users/{user}/permissions``). Every answer comes from the same rules the routes
apply (app/catalog/access.py, app/groups/permissions.py, app/workspaces/services.py), never a copy of them."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from sqlalchemy import select

from app.catalog import access as template_access
from app.catalog.models import Template
from app.core.errors import InvalidInput, NotFound
from app.core.extensions import db
from app.groups import permissions as group_permissions
from app.users.models import User
from app.workspaces import services as workspaces
from protocol.codec import JSON, JsonObject

TEMPLATE_ACTIONS = {"read": "use", "use": "use", "update": "admin", "delete": "admin", "view_insights": "admin"}
WORKSPACE_ACTIONS = ("read", "update", "delete", "workspace_start", "workspace_stop", "ssh", "application_connect")
MANAGE_ACTIONS = ("create", "update", "delete")


@dataclass(frozen=True)
class Check:
    resource_type: str
    action: str
    resource_id: str = ""


def site_permissions(user: User) -> dict[str, bool]:
    return {
        "create_template": template_access.administers_any(user, organizations_only=True),
        "push_template_versions": template_access.administers_any(user),
        "manage_groups": group_permissions.may_manage(user),
        "read_all_groups": group_permissions.sees_all(user),
        "manage_users": user.is_user_admin,
        "read_all_workspaces": user.is_template_admin or user.is_auditor,
    }


def template_permissions(user: User, template: Template) -> JsonObject:
    # What they may do with it, not what this request (a read) shows them: an organisation's auditor manages nothing.
    role = template_access.template_role(user, template, reading=False)
    return {"id": template.id, "name": template.name, "role": role, "use": role is not None, "admin": role == "admin"}


def find_template(reference: str) -> Template | None:
    """By id or by name (a deleted one is no template)."""
    query = select(Template).where(Template.deleted_at.is_(None))
    return db.session.scalar(query.where(Template.id == reference)) or db.session.scalar(
        query.where(Template.name == reference)
    )


def allowed(user: User, check: Check) -> bool:
    """One of Coder's authorisation checks, answered by our rules; an unknown resource or action is a 400."""
    deciders: dict[str, Callable[[User, Check], bool]] = {
        "template": _template,
        "workspace": _workspace,
        "group": _group,
        "user": _user,
    }
    decide = deciders.get(check.resource_type)
    if decide is None:
        raise InvalidInput(f"Unknown resource_type {check.resource_type!r}: use one of {', '.join(deciders)}.")
    return decide(user, check)


def _template(user: User, check: Check) -> bool:
    if check.action == "create":
        return template_access.administers_any(user, organizations_only=True)
    need = TEMPLATE_ACTIONS.get(check.action)
    if need is None:
        raise InvalidInput(f"Unknown template action {check.action!r}.")
    if not check.resource_id:  # "any template": may they do this to some template?
        return template_access.administers_any(user) if need == "admin" else True
    template = find_template(check.resource_id)
    # Reading (and an organisation auditor's view_insights) is judged as a read, the rest as the write it asks about.
    reading = check.action in ("read", "view_insights")
    return template is not None and template_access.may(
        user, template, "admin" if need == "admin" else "use", reading=reading
    )


def _workspace(user: User, check: Check) -> bool:
    if check.action == "create":
        return True
    if check.action not in WORKSPACE_ACTIONS:
        raise InvalidInput(f"Unknown workspace action {check.action!r}.")
    if not check.resource_id:
        return check.action == "read" and user.is_template_admin
    try:
        workspace = workspaces.get_workspace_for(user, check.resource_id)
    except NotFound:
        return False
    if check.action == "read":
        return True
    if check.action in ("workspace_start", "workspace_stop"):
        return workspaces.can_build(user, workspace)
    return workspaces.can_act(user, workspace)


def _group(user: User, check: Check) -> bool:
    if check.action in MANAGE_ACTIONS:
        return group_permissions.may_manage(user)
    if check.action != "read":
        raise InvalidInput(f"Unknown group action {check.action!r}.")
    return group_permissions.sees_all(user)


def _user(user: User, check: Check) -> bool:
    if check.action == "read" and check.resource_id in (user.id, "me"):
        return True
    if check.action not in ("read", *MANAGE_ACTIONS):
        raise InvalidInput(f"Unknown user action {check.action!r}.")
    return user.is_user_admin


def parse_checks(body: Mapping[str, JSON]) -> dict[str, Check]:
    """Coder's AuthorizationRequest: ``{checks: {key: {object: {resource_type, resource_id?}, action}}}``."""
    checks = body.get("checks")
    if not isinstance(checks, dict):
        raise InvalidInput("Invalid request.", validations=[{"field": "checks", "detail": "Must be an object."}])
    parsed: dict[str, Check] = {}
    problems: list[dict[str, str]] = []
    for key, value in checks.items():
        target = value.get("object") if isinstance(value, dict) else None
        action = value.get("action") if isinstance(value, dict) else None
        if not isinstance(target, dict) or not isinstance(action, str):
            problems.append({"field": f"checks.{key}", "detail": "Needs an object and an action."})
            continue
        resource_type, resource_id = target.get("resource_type"), target.get("resource_id") or ""
        if not isinstance(resource_type, str) or not isinstance(resource_id, str):
            problems.append({"field": f"checks.{key}.object", "detail": "resource_type and resource_id are text."})
            continue
        parsed[str(key)] = Check(resource_type, action, resource_id)
    if problems:
        raise InvalidInput("Some checks are invalid.", validations=problems)
    return parsed
