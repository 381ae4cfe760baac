"""PostgreSQL going away under a running server: requests get a 503 with a sentence (never a 500 or a traceback),
and the server recovers by itself once the database is back."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from flask import Flask

from app.factory import create_app
from tests.conftest import PASSWORD, close_app, make_settings
from tests.support.postgres import PostgresCluster
from tests.support.web import sign_in


@pytest.fixture
def database(postgres: PostgresCluster) -> Iterator[str]:
    name = f"outage_{uuid.uuid4().hex[:12]}"
    postgres.execute(f"CREATE DATABASE {name} TEMPLATE slipway_template")
    yield name
    postgres.execute(f"ALTER DATABASE {name} ALLOW_CONNECTIONS true")
    postgres.execute(f"DROP DATABASE {name} WITH (FORCE)")


@pytest.fixture
def server(
    tmp_path: Path, postgres: PostgresCluster, database: str, redis_server: str, migrated_templates: dict[str, str]
) -> Iterator[Flask]:
    app = create_app(make_settings(tmp_path, postgres.url(database), redis_server))
    yield app
    close_app(app)


def _take_down(postgres: PostgresCluster, database: str) -> None:
    """As a restart looks to the server: its connections are cut and new ones are refused."""
    postgres.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS false")
    cut = f"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = '{database}'"  # noqa: S608 - our name
    postgres.execute(cut)


def test_requests_while_the_database_is_down_get_a_503_and_it_recovers(
    server: Flask, postgres: PostgresCluster, database: str
) -> None:
    api, pages = server.test_client(), server.test_client()
    first = api.post(
        "/api/v2/users/first", json={"username": "alice", "email": "alice@example.com", "password": PASSWORD}
    )
    assert first.status_code == 201, first.json
    token = api.post("/api/v2/users/login", json={"email": "alice@example.com", "password": PASSWORD}).json
    auth = {"Authorization": f"Bearer {token['session_token']}"}
    sign_in(pages, "alice@example.com", PASSWORD)
    assert api.get("/api/v2/workspaces", headers=auth).status_code == 200

    _take_down(postgres, database)
    down = api.get("/api/v2/workspaces", headers=auth)
    assert down.status_code == 503, down.get_data(as_text=True)[:300]
    assert "database is not answering" in down.json["message"]
    page = pages.get("/workspaces")
    assert page.status_code == 503
    assert "database is not answering" in page.get_data(as_text=True)
    assert "Traceback" not in page.get_data(as_text=True)
    assert server.test_client().get("/healthz").status_code == 503

    postgres.execute(f"ALTER DATABASE {database} ALLOW_CONNECTIONS true")
    assert api.get("/api/v2/workspaces", headers=auth).status_code == 200
    assert pages.get("/workspaces").status_code == 200
