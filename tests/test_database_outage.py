"""PostgreSQL going away under a running server: requests get a 503 with a sentence (never a 500 or a traceback),
and the server recovers by itself once the database is back."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from flask import Flask

from app.factory import create_app
from tests.conftest import PASSWORD, close_app, make_settings
from tests.support.http_daemon import api_client, sign_up_owner
from tests.support.numbered_build import TERMINAL, NumberedBuild
from tests.support.postgres import PostgresCluster
from tests.support.provisionerd import DAEMON_PSK, DaemonProcess, wait_job
from tests.support.server import ServerProcess
from tests.support.waiting import wait_until
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")

OUTAGE_SECONDS = 15.0


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


@pytest.fixture
def own_postgres() -> Iterator[PostgresCluster]:
    """A cluster of the test's own: it is stopped mid-test, which the session's shared one must never be."""
    cluster = PostgresCluster()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _assert_unavailable(api: httpx.Client, path: str) -> None:
    reply = api.get(path)
    assert reply.status_code == 503, f"{path}: {reply.status_code} {reply.text[:500]}"
    assert "Traceback" not in reply.text, reply.text
    assert "database is not answering" in reply.json()["message"], reply.text


@pytest.mark.timeout(600)
def test_postgresql_restarted_mid_build_the_api_answers_503_and_the_build_succeeds_once(
    tmp_path: Path, own_postgres: PostgresCluster
) -> None:
    """The real server on PostgreSQL, a real external daemon mid-apply, and PostgreSQL stopped (as a restart does)
    for 15 s: the API answers 503 with a sentence all along (never a 500, nor a traceback); the daemon holds the log
    lines and the outcome the server cannot take; once PostgreSQL is back the server answers again by itself, and
    the build succeeds with each line in its log once and Terraform applied once."""
    own_postgres.execute("CREATE DATABASE slipway")
    env = {
        "SLIPWAY_DATABASE_URL": own_postgres.url("slipway"),
        "SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK,
        "SLIPWAY_PROVISIONER_HEARTBEAT_INTERVAL": "1s",
    }
    numbered = NumberedBuild(runs=tmp_path / "runs", switch=tmp_path / "switch")
    with (
        ServerProcess(tmp_path / "data", "--provisioner-daemons", "0", env=env) as server,
        api_client(server.url, sign_up_owner(server.url, PASSWORD)) as api,
        DaemonProcess(server.url, "builder", tmp_path, env={"SLIPWAY_PROVISIONER_DAEMON_PSK": DAEMON_PSK}) as daemon,
    ):
        daemon.wait_registered(api, timeout=60)
        build = numbered.start(api, numbered.template(api))

        own_postgres.halt()
        down_at = time.monotonic()
        outcome = tmp_path / "provisioner-cache" / "outbox"
        # Down for the outage's length, and until the apply has ended and its outcome waits on the daemon's disk,
        # so that both the held lines and the outcome cross the outage.
        while time.monotonic() - down_at < OUTAGE_SECONDS or not any(outcome.rglob(f"{build['job']['id']}.json")):
            assert time.monotonic() - down_at < 180, f"the apply did not end:\n{daemon.log()[-3000:]}"
            _assert_unavailable(api, "/workspaces")
            _assert_unavailable(api, "/users/me")
            # Once the daemon holds lines it could not ship, the apply may end, while the database is still away.
            if numbered.switch.exists() and "keeping them to send again" in daemon.log():
                numbered.switch.unlink()
            time.sleep(0.5)  # pacing the probes, not waiting for an event
        own_postgres.resume()

        wait_until(lambda: api.get("/workspaces").status_code == 200, timeout=60, what="the server to answer again")
        assert api.get("/users/me").status_code == 200
        done = wait_job(api, build["job"]["id"], TERMINAL, timeout=180)
        assert done["status"] == "succeeded", (done, daemon.log()[-3000:])
        numbered.assert_ran_once_and_logged_each_line_once(api, build["id"])
        wait_until(lambda: not any(outcome.rglob("*.json")), timeout=60, what="the outbox to empty")
        assert server.process is not None and server.process.poll() is None
        assert "unhandled error" not in server.log(), server.log()[-5000:]  # no request got a 500
