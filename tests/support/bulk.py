"""Many rows of one kind at once, through the ORM: lists are tested at hundreds of rows, and making each through
HTTP (or hashing a password per user) would take minutes. Each kind is copied from one real row, made the usual
way, so that what a list shows of it (its job, its version, its key) is all there."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import timedelta
from typing import Any, TypeVar

from flask import Flask
from sqlalchemy import func, inspect, select

from app.catalog.models import Template, TemplateAcl, TemplateVersion
from app.core.columns import new_id, utcnow
from app.core.extensions import Model, db
from app.notifications.models import FAILED, Notification, NotificationDelivery
from app.provisioning.models import ProvisionerDaemon, ProvisionerJob, ProvisionerKey
from app.users.models import KIND_TOKEN, ApiKey, User
from app.workspaces.models import Workspace, WorkspaceBuild

Row = TypeVar("Row", bound=Model)


def copy_of(row: Row, **changes: Any) -> Row:
    """A new row with ``row``'s columns but a new id (and ``changes``); relationships are not copied."""
    columns = {attr.key: getattr(row, attr.key) for attr in inspect(type(row)).column_attrs if attr.key != "id"}
    return type(row)(**{**columns, **changes})


def add_copies(app: Flask, model: type[Row], row_id: str, count: int, vary: Callable[[Row, int], list[Model]]) -> None:
    """``count`` more rows made by ``vary(original, n)`` (n numbers the copies after those already made)."""
    with app.app_context():
        original = db.session.get(model, row_id)
        assert original is not None
        made = db.session.scalar(select(func.count()).select_from(model)) or 0
        for number in range(made, made + count):
            db.session.add_all(vary(original, number))
        db.session.commit()
        db.session.remove()


def add_users(app: Flask, like_user_id: str, count: int) -> None:
    def vary(user: User, n: int) -> list[Model]:
        return [copy_of(user, username=f"user{n:04}", email=f"user{n:04}@example.com", roles=[])]

    add_copies(app, User, like_user_id, count, vary)


def add_tokens(app: Flask, owner_id: str, count: int) -> None:
    """API tokens of ``owner_id``'s, copied from a session token of theirs (the columns are the same)."""
    with app.app_context():
        session_key = db.session.scalar(select(ApiKey.id).where(ApiKey.user_id == owner_id))
    assert session_key is not None

    def vary(key: ApiKey, n: int) -> list[Model]:
        lookup = hashlib.sha256(f"{owner_id}-{n}".encode()).hexdigest()[:16]
        return [copy_of(key, kind=KIND_TOKEN, name=f"token{n:04}", lookup_id=lookup)]

    add_copies(app, ApiKey, session_key, count, vary)


def add_templates(app: Flask, like_template_id: str, count: int) -> None:
    """Copies with the original's access list (whoever may use it may use them)."""
    with app.app_context():
        entries = db.session.scalars(select(TemplateAcl).where(TemplateAcl.template_id == like_template_id)).all()
        db.session.expunge_all()

    def vary(template: Template, n: int) -> list[Model]:
        copy = copy_of(template, name=f"t{n:04}", id=new_id())
        return [copy, *(copy_of(entry, template_id=copy.id) for entry in entries)]

    add_copies(app, Template, like_template_id, count, vary)


def add_versions(app: Flask, like_version_id: str, count: int) -> None:
    """More versions of the version's template, each with its own import job (a copy of the version's, made now)."""

    def vary(version: TemplateVersion, n: int) -> list[Model]:
        now = utcnow()
        job = copy_of(version.job, id=new_id(), created_at=now, completed_at=now)
        return [job, copy_of(version, name=f"v{n:04}", job_id=job.id)]

    add_copies(app, TemplateVersion, like_version_id, count, vary)


def add_workspaces(app: Flask, like_workspace_id: str, count: int) -> None:
    """More workspaces of the same owner and template, each with a first build and job like the workspace's."""

    def vary(workspace: Workspace, n: int) -> list[Model]:
        build = db.session.scalars(select(WorkspaceBuild).where(WorkspaceBuild.workspace_id == workspace.id)).first()
        assert build is not None
        job = copy_of(db.session.get_one(ProvisionerJob, build.job_id), id=new_id(), created_at=utcnow())
        name, build_id = f"w{n:04}", new_id()
        copy = copy_of(workspace, id=new_id(), name=name, name_key=name, latest_build_id=build_id)
        return [job, copy, copy_of(build, id=build_id, workspace_id=copy.id, job_id=job.id)]

    add_copies(app, Workspace, like_workspace_id, count, vary)


def add_builds(app: Flask, workspace_id: str, count: int, daemon_id: str) -> None:
    """More builds of one workspace, numbered after its latest, each with its own job (a copy of the latest's)
    that ``daemon_id`` ran to the end: a workspace's history is mostly finished builds."""
    with app.app_context():
        latest = db.session.scalars(
            select(WorkspaceBuild)
            .where(WorkspaceBuild.workspace_id == workspace_id)
            .order_by(WorkspaceBuild.build_number.desc())
        ).first()
        assert latest is not None
        job, now = db.session.get_one(ProvisionerJob, latest.job_id), utcnow()
        jobs = [
            copy_of(job, worker_id=daemon_id, created_at=now, started_at=now, completed_at=now) for _ in range(count)
        ]
        db.session.add_all(jobs)
        db.session.flush()
        builds = [
            copy_of(latest, id=new_id(), build_number=latest.build_number + 1 + n, job_id=job.id)
            for n, job in enumerate(jobs)
        ]
        db.session.add_all(builds)
        db.session.get_one(Workspace, workspace_id).latest_build_id = builds[-1].id
        db.session.commit()
        db.session.remove()


def add_daemons(app: Flask, like_daemon_id: str, count: int) -> None:
    """Daemons last seen an hour ago: offline, as most of a long list are (every online daemon is matched against
    every pending job to place jobs in queues, work that grows with both but asks the database nothing). Older
    than the daemon copied, so that the first page of a list (newest first) still shows it and its jobs."""
    last_seen = utcnow() - timedelta(hours=1)

    def vary(daemon: ProvisionerDaemon, n: int) -> list[Model]:
        created = daemon.created_at - timedelta(days=1)
        return [copy_of(daemon, name=f"d{n:04}", instance_id=None, last_seen_at=last_seen, created_at=created)]

    add_copies(app, ProvisionerDaemon, like_daemon_id, count, vary)


def add_keys(app: Flask, created_by: str, count: int) -> None:
    with app.app_context():
        made = db.session.scalar(select(func.count()).select_from(ProvisionerKey)) or 0
        db.session.add_all(
            ProvisionerKey(
                name=f"key{n:04}",
                hashed_secret=hashlib.sha256(f"secret{n}".encode()).hexdigest(),
                tags={"pool": str(n % 3)},
                created_by=created_by,
            )
            for n in range(made, made + count)
        )
        db.session.commit()
        db.session.remove()


def add_notifications(app: Flask, user_id: str, count: int) -> None:
    with app.app_context():
        db.session.add_all(
            Notification(user_id=user_id, event="workspace_stopped", title=f"Stopped {n}") for n in range(count)
        )
        db.session.commit()
        db.session.remove()


def add_failing_deliveries(app: Flask, user_id: str, count: int) -> None:
    """Notifications of ``user_id``'s whose webhook delivery failed for good."""
    with app.app_context():
        notifications = [
            Notification(id=new_id(), user_id=user_id, event="workspace_stopped", title=f"Stopped {n}")
            for n in range(count)
        ]
        db.session.add_all(notifications)
        db.session.add_all(
            NotificationDelivery(
                notification_id=notification.id, channel="webhook", status=FAILED, attempts=5, last_error="HTTP 500"
            )
            for notification in notifications
        )
        db.session.commit()
        db.session.remove()
