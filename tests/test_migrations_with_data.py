"""Migrations on a deployment with data. 0009: rows written at revision 0008 are encrypted in place and read back
through the app (nothing lost, agent logs kept), and the downgrade gives the plaintext back. And a table that
Alembic's batch mode rebuilds on SQLite (0008) keeps the rows of other tables that reference it."""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from flask import Flask
from flask_migrate import downgrade, upgrade
from sqlalchemy import select

from app.agents.manifest import environment
from app.catalog.models import TemplateVersion
from app.core.crypto import EncryptionKey
from app.core.encryption_keys import EncryptionKeyRecord
from app.core.extensions import db
from app.factory import create_app
from app.resources.models import WorkspaceAgent, WorkspaceResource
from app.workspaces.models import WorkspaceBuild
from protocol.provisionerd import NameValue, TemplateVariable
from protocol.resources import MetadataItem
from tests.conftest import close_app, make_settings
from tests.support.postgres import PostgresCluster

KEY = os.urandom(32)
SECRET = "variable-secret-64be1f0a"
STATE = b'{"version": 4, "resources": [{"attributes": {"token": "agent-token-0d9c2a71"}}]}'
IDS = {name: str(uuid.uuid4()) for name in ("user", "file", "import", "build_job", "version", "template")}
IDS.update({name: str(uuid.uuid4()) for name in ("workspace", "build", "resource", "agent", "legacy", "source")})


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(
    request: pytest.FixtureRequest, tmp_path: Path, postgres: PostgresCluster, redis_server: str
) -> Iterator[Flask]:
    """An app (its first key: KEY) on a database no migration has touched yet."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'slipway.db'}"
    else:
        name = f"migration_{uuid.uuid4().hex[:12]}"
        postgres.execute(f"CREATE DATABASE {name}")
        url = postgres.url(name)
    app = create_app(make_settings(tmp_path, url, redis_server, encryption_keys=base64.b64encode(KEY).decode()))
    yield app
    close_app(app)
    if request.param == "postgresql":
        postgres.execute(f"DROP DATABASE {name} WITH (FORCE)")


def insert(connection: sa.Connection, table_name: str, **values: Any) -> None:
    """Insert a row at revision 0008, with a placeholder for every required column the test does not care about."""
    table = sa.Table(table_name, sa.MetaData(), autoload_with=connection)
    for column in table.columns:
        if (
            column.name in values
            or column.nullable
            or column.server_default is not None
            or column.autoincrement is True
        ):
            continue
        if isinstance(column.type, sa.Integer) and column.primary_key:
            continue
        values[column.name] = placeholder(column.type)
    connection.execute(table.insert().values(values))


def placeholder(column_type: sa.types.TypeEngine[Any]) -> object:
    if isinstance(column_type, sa.JSON):
        return {}
    if isinstance(column_type, sa.Boolean):
        return False
    if isinstance(column_type, sa.Integer):
        return 0
    if isinstance(column_type, sa.DateTime):
        return datetime.now(UTC)
    if isinstance(column_type, sa.LargeBinary):
        return b""
    return "x"


def write_rows_at_0008(connection: sa.Connection) -> None:
    insert(connection, "users", id=IDS["user"], username="alice", email="alice@example.com", roles=["owner"])
    insert(connection, "files", id=IDS["file"], sha256="0" * 64, data=b"tar", created_by=IDS["user"])
    for job in ("import", "build_job"):
        insert(connection, "provisioner_jobs", id=IDS[job], file_id=IDS["file"], initiator_id=IDS["user"])
    insert(
        connection, "template_versions", id=IDS["version"], job_id=IDS["import"], created_by=IDS["user"],
        user_variable_values=[{"name": "db_password", "value": SECRET}],
        variables=[
            {"name": "db_password", "sensitive": True, "default_value": "default-secret-9e1b"},
            {"name": "region", "default_value": "eu"},
        ],
    )  # fmt: skip
    insert(connection, "templates", id=IDS["template"], name="dev", created_by=IDS["user"])
    insert(connection, "workspaces", id=IDS["workspace"], name="w1", owner_id=IDS["user"], template_id=IDS["template"])
    insert(
        connection, "workspace_builds", id=IDS["build"], workspace_id=IDS["workspace"], build_number=1,
        transition="start", template_version_id=IDS["version"], job_id=IDS["build_job"], initiator_id=IDS["user"],
        state=STATE,
    )  # fmt: skip
    insert(
        connection, "workspace_resources", id=IDS["resource"], job_id=IDS["build_job"], transition="start",
        kind="computational",
        metadata_items=[
            {"key": "password", "value": "metadata-secret-5f", "sensitive": True}, {"key": "region", "value": "eu"}
        ],
    )  # fmt: skip
    insert(
        connection, "workspace_agents", id=IDS["agent"], resource_id=IDS["resource"], name="main",
        env={"A": "1"}, startup_script="echo hi",
        definition={"name": "main", "env": {"A": "1"}, "startup_script": "echo hi", "apps": [{"slug": "web"}]},
    )  # fmt: skip
    # An older row whose definition lacks what only the dropped columns held.
    insert(
        connection, "workspace_agents", id=IDS["legacy"], resource_id=IDS["resource"], name="legacy",
        env={"LEGACY": "yes"}, startup_script="echo legacy", shutdown_script="echo bye", definition={"name": "legacy"},
    )  # fmt: skip
    insert(connection, "workspace_agent_log_sources", id=IDS["source"], agent_id=IDS["agent"], display_name="Startup")
    for number in range(3):
        insert(
            connection, "workspace_agent_logs", agent_id=IDS["agent"], source_id=IDS["source"], output=f"line {number}"
        )


def raw(connection: sa.Connection, statement: str, **params: str) -> Any:
    return connection.execute(sa.text(statement), params).scalar_one()


def test_upgrade_encrypts_rows_written_at_0008_and_downgrade_restores_them(empty_database: Flask) -> None:
    app = empty_database
    key_id = EncryptionKey(KEY).key_id
    with app.app_context():
        upgrade(revision="0008")
        with db.engine.begin() as connection:
            write_rows_at_0008(connection)
        upgrade()

        with db.engine.connect() as connection:
            stored_state = bytes(raw(connection, "SELECT state FROM workspace_builds"))
            stored_values = bytes(raw(connection, "SELECT user_variable_values FROM template_versions"))
            assert stored_state.startswith(f"enc1:{key_id}:".encode()) and b"agent-token" not in stored_state
            assert stored_values.startswith(f"enc1:{key_id}:".encode()) and SECRET.encode() not in stored_values
            assert raw(connection, "SELECT count(*) FROM workspace_agent_logs") == 3, "agent logs must survive"

        # Read back through the app.
        assert db.session.get(WorkspaceBuild, IDS["build"]).state == STATE  # type: ignore[union-attr]
        version = db.session.get(TemplateVersion, IDS["version"])
        assert version is not None
        assert version.user_variable_values == (NameValue(name="db_password", value=SECRET),)
        assert version.variables == (
            TemplateVariable(name="db_password", sensitive=True, default_value=""),
            TemplateVariable(name="region", default_value="eu"),
        )
        resource = db.session.get(WorkspaceResource, IDS["resource"])
        assert resource is not None and resource.metadata_items == (
            MetadataItem(key="password", value="", sensitive=True),
            MetadataItem(key="region", value="eu"),
        )
        agent = db.session.get(WorkspaceAgent, IDS["agent"])
        legacy = db.session.get(WorkspaceAgent, IDS["legacy"])
        assert agent is not None and legacy is not None
        assert environment(agent) == {"A": "1"} and agent.definition.startup_script == "echo hi"
        assert agent.definition.apps[0].slug == "web" and len(agent.log_sources) == 1
        assert environment(legacy) == {"LEGACY": "yes"}
        assert (legacy.definition.startup_script, legacy.definition.shutdown_script) == ("echo legacy", "echo bye")
        assert db.session.scalars(select(EncryptionKeyRecord.key_id)).all() == [key_id]
        db.session.remove()

        downgrade(revision="0008")
        with db.engine.connect() as connection:
            assert bytes(raw(connection, "SELECT state FROM workspace_builds")) == STATE
            values = raw(connection, "SELECT user_variable_values FROM template_versions")
            assert (json.loads(values) if isinstance(values, str) else values) == [
                {"name": "db_password", "value": SECRET}
            ]
            env = raw(connection, "SELECT env FROM workspace_agents WHERE id = :id", id=IDS["legacy"])
            assert (json.loads(env) if isinstance(env, str) else env) == {"LEGACY": "yes"}
            assert raw(connection, "SELECT startup_script FROM workspace_agents WHERE id = :id", id=IDS["legacy"]) == (
                "echo legacy"
            )
            definition = raw(connection, "SELECT definition FROM workspace_agents WHERE id = :id", id=IDS["agent"])
            assert (json.loads(definition) if isinstance(definition, str) else definition)["apps"] == [{"slug": "web"}]
            assert raw(connection, "SELECT count(*) FROM workspace_agent_logs") == 3
            assert "encryption_keys" not in sa.inspect(connection).get_table_names()

        # And up again: the cycle loses nothing.
        upgrade()
        assert db.session.get(WorkspaceBuild, IDS["build"]).state == STATE  # type: ignore[union-attr]
        db.session.remove()


def test_a_table_rebuilt_on_sqlite_keeps_the_rows_that_reference_it(empty_database: Flask) -> None:
    """0008 rebuilds provisioner_jobs (batch mode: copy, drop, rename): the drop must not cascade to the jobs' logs
    and resources, and foreign keys are enforced again afterwards."""
    with empty_database.app_context():
        upgrade(revision="0007")
        with db.engine.begin() as connection:
            insert(connection, "users", id=IDS["user"], username="alice", email="alice@example.com", roles=[])
            insert(connection, "files", id=IDS["file"], sha256="0" * 64, data=b"tar", created_by=IDS["user"])
            insert(connection, "provisioner_jobs", id=IDS["import"], file_id=IDS["file"], initiator_id=IDS["user"])
            insert(connection, "provisioner_job_logs", job_id=IDS["import"], output="hello")
            insert(connection, "workspace_resources", id=IDS["resource"], job_id=IDS["import"], transition="start")
        upgrade(revision="0008")
        with db.engine.connect() as connection:
            assert raw(connection, "SELECT count(*) FROM provisioner_job_logs") == 1
            assert raw(connection, "SELECT count(*) FROM workspace_resources") == 1
            if connection.dialect.name == "sqlite":
                assert raw(connection, "PRAGMA foreign_keys") == 1


def test_names_that_differ_only_in_case_are_renamed_not_lost_when_names_become_case_insensitive(
    empty_database: Flask,
) -> None:
    """0020: workspaces that raced in as "Dev" and "dev" (and a deleted "DEV") all stay; the later live one is
    renamed with a number, and the old unique index gives way to one on the lower case name."""
    with empty_database.app_context():
        upgrade(revision="0019")
        with db.engine.begin() as connection:
            insert(connection, "users", id=IDS["user"], username="alice", email="alice@example.com", roles=[])
            insert(connection, "templates", id=IDS["template"], name="dev", created_by=IDS["user"])
            for number, (name, deleted) in enumerate([("Dev", False), ("dev", False), ("DEV", True), ("dev-2", False)]):
                insert(
                    connection, "workspaces", id=f"w{number}", name=name, owner_id=IDS["user"],
                    template_id=IDS["template"], deleted=deleted, created_at=datetime(2026, 1, 1 + number, tzinfo=UTC),
                )  # fmt: skip
        upgrade(revision="0020")
        with db.engine.connect() as connection:
            rows = connection.execute(sa.text("SELECT id, name, name_key FROM workspaces ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [
            ("w0", "Dev", "dev"), ("w1", "dev-3", "dev-3"), ("w2", "DEV", "dev"), ("w3", "dev-2", "dev-2"),
        ]  # fmt: skip


def test_version_names_shared_within_a_template_are_renamed_not_lost_when_they_become_unique(
    empty_database: Flask,
) -> None:
    """0028: a template's later versions of a name already taken get a number; other templates' are left alone."""
    with empty_database.app_context():
        upgrade(revision="0027")
        with db.engine.begin() as connection:
            insert(connection, "users", id=IDS["user"], username="alice", email="alice@example.com", roles=[])
            insert(connection, "files", id=IDS["file"], sha256="0" * 64, data=b"tar", created_by=IDS["user"])
            for template in ("t1", "t2"):
                insert(connection, "templates", id=template, name=template, created_by=IDS["user"])
            versions = [("a", "t1", "good"), ("b", "t1", "good"), ("c", "t1", "good-2"), ("d", "t2", "good")]
            for number, (version_id, template, name) in enumerate(versions):
                insert(
                    connection, "provisioner_jobs", id=f"j{version_id}", file_id=IDS["file"], initiator_id=IDS["user"]
                )
                insert(
                    connection, "template_versions", id=version_id, template_id=template, name=name,
                    job_id=f"j{version_id}", created_by=IDS["user"],
                    created_at=datetime(2026, 1, 1 + number, tzinfo=UTC),
                )  # fmt: skip
        upgrade(revision="0028")
        with db.engine.connect() as connection:
            rows = connection.execute(sa.text("SELECT id, name FROM template_versions ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [("a", "good"), ("b", "good-3"), ("c", "good-2"), ("d", "good")]


def test_each_workspace_learns_its_newest_build_when_it_starts_keeping_it(empty_database: Flask) -> None:
    """0032: the backfill points each workspace at its highest-numbered build, not its first or its last written."""
    with empty_database.app_context():
        upgrade(revision="0031")
        with db.engine.begin() as connection:
            insert(connection, "users", id=IDS["user"], username="alice", email="alice@example.com", roles=[])
            insert(connection, "files", id=IDS["file"], sha256="0" * 64, data=b"tar", created_by=IDS["user"])
            insert(connection, "provisioner_jobs", id="import", file_id=IDS["file"], initiator_id=IDS["user"])
            insert(connection, "template_versions", id="v", job_id="import", created_by=IDS["user"])
            insert(connection, "templates", id="t", name="dev", created_by=IDS["user"])
            # Written out of order: build 3 before build 2.
            for workspace, numbers in (("w1", (1, 3, 2)), ("w2", (1,))):
                insert(connection, "workspaces", id=workspace, name=workspace, name_key=workspace, owner_id=IDS["user"],
                       template_id="t")  # fmt: skip
                for number in numbers:
                    insert(connection, "provisioner_jobs", id=f"j{workspace}{number}", file_id=IDS["file"],
                           initiator_id=IDS["user"])  # fmt: skip
                    insert(
                        connection, "workspace_builds", id=f"{workspace}-b{number}", workspace_id=workspace,
                        build_number=number, transition="start", template_version_id="v",
                        job_id=f"j{workspace}{number}", initiator_id=IDS["user"],
                    )  # fmt: skip
        upgrade(revision="0032")
        with db.engine.connect() as connection:
            rows = connection.execute(sa.text("SELECT id, latest_build_id FROM workspaces ORDER BY id")).all()
        assert [tuple(row) for row in rows] == [("w1", "w1-b3"), ("w2", "w2-b1")]


def test_every_person_template_daemon_and_key_joins_the_default_organisation_and_templates_stay_open(
    empty_database: Flask,
) -> None:
    """0038: nothing changes for anyone on upgrade. Every user is a member of the default organisation (and so of
    its Everyone group, whose id is the organisation's), every template, daemon and key is the organisation's, and
    every template, deleted or not, lets Everyone use it; the downgrade takes it all away again."""
    with empty_database.app_context():
        upgrade(revision="0037")
        with db.engine.begin() as connection:
            for name in ("alice", "bob"):
                insert(connection, "users", id=name, username=name, email=f"{name}@example.com", roles=[])
            insert(connection, "templates", id="t1", name="dev", created_by="alice")
            insert(connection, "templates", id="t2", name="gone", created_by="alice", deleted_at=datetime.now(UTC))
            insert(connection, "provisioner_keys", id="k", name="gpu", hashed_secret="0" * 64)
            insert(connection, "provisioner_daemons", id="d", name="builtin-1", auth="builtin")
        upgrade(revision="0038")
        with db.engine.connect() as connection:
            org = raw(connection, "SELECT id FROM organizations WHERE is_default")
            assert raw(connection, "SELECT name FROM organizations") == "default"
            assert raw(connection, "SELECT name FROM groups WHERE id = :org", org=org) == "Everyone"
            members = connection.execute(sa.text("SELECT organization_id, user_id FROM organization_members")).all()
            assert sorted(tuple(row) for row in members) == [(org, "alice"), (org, "bob")]
            for table in ("templates", "provisioner_daemons", "provisioner_keys"):
                owners = connection.execute(sa.text(f"SELECT DISTINCT organization_id FROM {table}")).scalars().all()  # noqa: S608
                assert owners == [org], table
            acl = connection.execute(sa.text("SELECT template_id, user_id, group_id, role FROM template_acl")).all()
            assert sorted(tuple(row) for row in acl) == [("t1", None, org, "use"), ("t2", None, org, "use")]
            assert raw(connection, "SELECT count(*) FROM group_members") == 0, "Everyone's members are not stored"
        downgrade(revision="0037")
        with db.engine.connect() as connection:
            tables = sa.inspect(connection).get_table_names()
            assert not {"organizations", "groups", "template_acl", "workspace_acl"} & set(tables)
            assert raw(connection, "SELECT count(*) FROM templates") == 2


def test_monthly_people_and_app_rollups_are_backfilled_as_the_sums_of_their_days(empty_database: Flask) -> None:
    """0054: each template's month holds one row per person (their seconds and days summed) and per way in, from the
    daily rows of that month only (a month's end and the next month's start, a year's end, kept apart)."""
    people = [("t", "2025-12-31", "alice", 10), ("t", "2026-01-01", "alice", 20), ("t", "2026-01-31", "alice", 5),
              ("t", "2026-01-15", "bob", 7), ("u", "2026-01-15", "alice", 3)]  # fmt: skip
    apps = [("t", "2025-12-31", 1, 60), ("t", "2026-01-01", 2, 30), ("t", "2026-01-20", 3, 10)]
    with empty_database.app_context():
        upgrade(revision="0053")
        with db.engine.begin() as connection:
            for template, day, user, seconds in people:
                insert(connection, "template_user_daily", template_id=template, day=datetime.fromisoformat(day).date(),
                       user_id=user, seconds=seconds)  # fmt: skip
            for template, day, sessions, seconds in apps:
                insert(connection, "template_app_daily", template_id=template, day=datetime.fromisoformat(day).date(),
                       kind="app", slug="code", sessions=sessions, seconds=seconds)  # fmt: skip
        upgrade(revision="0054")
        with db.engine.connect() as connection:
            months = connection.execute(
                sa.text("SELECT template_id, month, user_id, seconds, days FROM template_user_monthly")
            ).all()
            app_months = connection.execute(
                sa.text("SELECT template_id, month, kind, slug, sessions, seconds FROM template_app_monthly")
            ).all()
        assert sorted((t, str(m)[:10], u, s, d) for t, m, u, s, d in months) == [
            ("t", "2025-12-01", "alice", 10, 1),
            ("t", "2026-01-01", "alice", 25, 2),
            ("t", "2026-01-01", "bob", 7, 1),
            ("u", "2026-01-01", "alice", 3, 1),
        ]
        assert sorted((t, str(m)[:10], k, sl, n, s) for t, m, k, sl, n, s in app_months) == [
            ("t", "2025-12-01", "app", "code", 1, 60),
            ("t", "2026-01-01", "app", "code", 5, 40),
        ]
        downgrade(revision="0053")
        with db.engine.connect() as connection:
            tables = set(sa.inspect(connection).get_table_names())
        assert not {"template_user_monthly", "template_app_monthly"} & tables
        assert "template_user_daily" in tables
