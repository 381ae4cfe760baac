from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.config import Settings
from tests.conftest import make_settings

pytestmark = pytest.mark.databases("sqlite", "postgresql")

AppFactory = Callable[[Settings], Flask]


def test_healthz_is_ok_when_database_and_redis_answer(client: FlaskClient) -> None:
    response = client.get("/healthz")
    assert response.status_code == 200
    assert response.get_data(as_text=True).strip() == "OK"


def test_healthz_names_redis_when_it_is_down(tmp_path: Path, database_url: str, app_factory: AppFactory) -> None:
    app = app_factory(make_settings(tmp_path, database_url, f"unix://{tmp_path}/no-redis.sock"))
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    assert response.get_data(as_text=True).strip() == "unhealthy: redis not answering"


def test_healthz_names_the_database_when_it_is_down(tmp_path: Path, redis_server: str, app_factory: AppFactory) -> None:
    app = app_factory(make_settings(tmp_path, f"sqlite:///{tmp_path}/missing-dir/x.db", redis_server))
    response = app.test_client().get("/healthz")
    assert response.status_code == 503
    assert "database" in response.get_data(as_text=True)
