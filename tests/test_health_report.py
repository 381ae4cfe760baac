"""The health report (`GET /api/v2/debug/health`, the Health page, the navigation's dot): a real server whose
every check passes, and in-process (both databases) the provisioner findings, dismissal and access per role."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import httpx
import pytest
from flask import Flask
from flask.testing import FlaskClient

from app.core.columns import utcnow
from app.core.config import Settings
from app.core.extensions import db
from app.provisioning.models import ProvisionerDaemon
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.daemon import PSK, PSK_HEADERS, FakeDaemon, import_template, push_version
from tests.support.http_daemon import api_client, sign_up_owner
from tests.support.organizations import add_organization
from tests.support.server import ServerProcess
from tests.support.waiting import wait_until
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")


@pytest.fixture
def settings(tmp_path: Any, database_url: str, redis_server: str) -> Settings:
    return make_settings(tmp_path, database_url, redis_server, provisioner_daemon_psk=PSK)


def codes(section: dict[str, Any]) -> list[str]:
    return [warning["code"] for warning in section["warnings"]]


def test_a_healthy_server_reports_ok_through_its_own_access_url(tmp_path: Any) -> None:
    with ServerProcess(tmp_path / "data", "--provisioner-daemons", "1") as server:
        owner = api_client(server.url, sign_up_owner(server.url, PASSWORD))
        report: dict[str, Any] = {}

        def daemon_counted() -> bool:  # the built-in daemon registers a moment after the server answers
            report.update(owner.get("/debug/health", params={"force": "true"}).json())
            return bool(report["provisioners"]["online"])

        wait_until(daemon_counted, 60, "the built-in daemon in the report")
        assert report["access_url"]["severity"] == "ok" and report["access_url"]["reachable"] is True
        assert report["websocket"]["severity"] == "ok", report["websocket"]
        assert "tags_unserved" not in codes(report["provisioners"]), report["provisioners"]["warnings"]
        # Latency thresholds may be crossed on a loaded machine: a warning, never an error.
        assert report["database"]["severity"] in ("ok", "warning") and report["database"]["latency_ms"] >= 0
        assert report["redis"]["severity"] in ("ok", "warning")
        assert report["healthy"] is True and report["severity"] in ("ok", "warning")
        # The echo opens only with the server's own signature.
        upgrade = {"Upgrade": "websocket", "Connection": "Upgrade", "Sec-WebSocket-Version": "13",
                   "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ=="}  # fmt: skip
        refused = httpx.get(f"{server.url}/api/v2/debug/ws?expires=9999999999&signature=forged", headers=upgrade)
        assert refused.status_code == 401
        assert httpx.get(f"{server.url}/api/v2/debug/health").status_code == 401
        owner.close()


def test_provisioner_findings_dismissal_and_the_dot(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    alice, bob, carol = personas["alice"], personas["bob"], personas["carol"]
    gpu = FakeDaemon(client, "gpu-box", {"gpu": "a100"})
    version = push_version(client, bob, {"gpu": "a100"})
    job_id = version["job"]["id"]
    assert gpu.call(f"/jobs/{job_id}/acquire").status_code == 200
    assert gpu.call(f"/jobs/{job_id}/complete", {"template_import": {}}).status_code == 204
    assert client.post("/api/v2/templates", json={"name": "gpu", "version_id": version["id"]}, headers=bob.auth)
    FakeDaemon(client, "plain")
    on_demand = client.post(
        "/api/v2/provisionerd/register", json={"name": "run-once-7", "ephemeral": True}, headers=PSK_HEADERS
    )
    assert on_demand.status_code == 201
    with app.app_context():  # the GPU daemon goes silent, and so does the run-once one (its normal end)
        for name in ("gpu-box", "run-once-7"):
            daemon = db.session.scalars(db.select(ProvisionerDaemon).filter_by(name=name)).one()
            daemon.last_seen_at = utcnow() - timedelta(minutes=5)
        db.session.commit()
    # A new version of the template waits on the same tag set: one finding, the waiting job's, not two.
    waiting = push_version(client, bob, {"gpu": "a100"})

    report = client.get("/api/v2/debug/health?force=true", headers=alice.auth).json
    provisioners = report["provisioners"]
    assert codes(provisioners).count("tags_unserved") == 1
    assert provisioners["severity"] == "warning" and provisioners["online"] == 1
    assert set(codes(provisioners)) == {"daemons_silent", "tags_unserved", "daemon_version"}
    unserved = next(w for w in provisioners["warnings"] if w["code"] == "tags_unserved")
    assert "gpu=a100" in unserved["message"] and f"version {waiting['name']}" in unserved["message"]
    silent = next(w for w in provisioners["warnings"] if w["code"] == "daemons_silent")
    assert "gpu-box" in silent["message"] and "run-once-7" not in silent["message"]
    # No server listens at the test's access URL: both checks through it say so.
    assert codes(report["access_url"]) == ["access_url_unreachable"] and report["severity"] == "error"
    assert codes(report["websocket"]) == ["websocket_failed"] and report["healthy"] is False

    # The dot (admins only), from the cached report; the page lists every section.
    sign_in(client, alice.email, PASSWORD)
    page = client.get("/health")
    assert page.status_code == 200 and 'id="health-provisioners"' in page.text and "gpu=a100" in page.text
    assert 'id="health-dot"' in client.get("/workspaces").text
    member = app.test_client()
    sign_in(member, carol.email, PASSWORD)
    assert "health-dot" not in member.get("/workspaces").text and member.get("/health").status_code == 403

    # Dismissed sections still show, marked, and no longer count.
    body = {"dismissed_healthchecks": ["access_url", "websocket"]}
    assert client.put("/api/v2/debug/health/settings", json=body, headers=bob.auth).status_code == 403
    assert client.put("/api/v2/debug/health/settings", json=body, headers=alice.auth).json == body
    report = client.get("/api/v2/debug/health", headers=alice.auth).json
    assert report["access_url"]["dismissed"] is True and report["severity"] == "warning" and report["healthy"]
    bad = client.put("/api/v2/debug/health/settings", json={"dismissed_healthchecks": ["derp"]}, headers=alice.auth)
    assert bad.status_code == 400 and bad.json["validations"][0]["field"] == "dismissed_healthchecks"


@pytest.mark.parametrize(("persona", "status"), [("alice", 200), ("bob", 200), ("carol", 403), (None, 401)])
def test_the_report_is_for_admins(
    client: FlaskClient, personas: dict[str, Persona], persona: str | None, status: int
) -> None:
    headers = personas[persona].auth if persona else {}
    assert client.get("/api/v2/debug/health", headers=headers).status_code == status
    assert client.get("/api/v2/debug/health/settings", headers=headers).status_code == status


def test_the_maintenance_loop_refreshes_an_expired_report_once_the_server_has_settled(
    app: Flask, settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    from app.core.redis_client import get_redis
    from app.diagnostics import checks

    with app.app_context():
        get_redis().delete(checks.REPORT_KEY, checks.REFRESH_LOCK_KEY)
        monkeypatch.setattr(checks, "_PROCESS_STARTED", time.monotonic())
        checks.refresh_report(settings)  # just started: no report yet
        assert checks.cached_severity() is None
        monkeypatch.setattr(checks, "_PROCESS_STARTED", 0.0)
        checks.refresh_report(settings)
        assert checks.cached_severity() == "error"  # nothing listens at the test's access URL
        first = get_redis().get(checks.REPORT_KEY)
        checks.refresh_report(settings)  # still fresh: left alone
        assert get_redis().get(checks.REPORT_KEY) == first


def unserved(report: dict[str, Any]) -> list[dict[str, Any]]:
    return [warning for warning in report["provisioners"]["warnings"] if warning["code"] == "tags_unserved"]


def test_a_pushed_version_waiting_on_tags_nobody_serves_is_named_until_a_daemon_serves_them(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    alice, bob = personas["alice"], personas["bob"]
    FakeDaemon(client, "plain")
    FakeDaemon(client, "a100-box", {"gpu": "a100"})
    queued = push_version(client, bob, {"gpu": "a100"})  # served: merely queued, no finding
    first = push_version(client, bob, {"gpu": "h100"})
    push_version(client, bob, {"gpu": "h100"})

    report = client.get("/api/v2/debug/health?force=true", headers=alice.auth).json
    [warning] = unserved(report)
    assert "gpu=h100" in warning["message"] and "2 jobs wait" in warning["message"]
    assert f"version {first['name']}" in warning["message"] and "--tag gpu=h100" in warning["message"]
    assert "a100" not in warning["message"] and "Organisation" not in warning["message"]
    [finding] = report["provisioners"]["unserved"]
    assert finding["tags"] == {"gpu": "h100", "scope": "organization", "owner": ""} and finding["jobs"] == 2
    assert finding["oldest_created_at"] == first["job"]["created_at"] and finding["oldest_waiting_seconds"] >= 0
    assert queued["job"]["status"] == "pending"

    FakeDaemon(client, "h100-box", {"gpu": "h100"})
    report = client.get("/api/v2/debug/health?force=true", headers=alice.auth).json
    assert unserved(report) == [] and report["provisioners"]["unserved"] == []
    assert "tags_unserved" not in codes(report["provisioners"]), report["provisioners"]["warnings"]


def test_a_build_waiting_on_its_owners_own_daemon_is_named_under_its_organisation(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    alice, bob, carol = personas["alice"], personas["bob"], personas["carol"]
    FakeDaemon(client, "plain")  # the default organisation's: it serves none of acme's jobs
    acme_id = add_organization(app, "acme", [bob.id, carol.id])
    acme_daemon = FakeDaemon(client, "acme-plain", organization="acme")
    # The template's builds run on their owner's own daemons (coder_workspace_tags gives scope=user).
    template = import_template(client, personas, acme_daemon, workspace_tags={"scope": "user"}, organization="acme")
    assert template["organization_id"] == acme_id
    body = {"template_id": template["id"], "name": "ws", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    assert client.post("/api/v2/workspaces", json=body, headers=carol.auth).status_code == 201

    report = client.get("/api/v2/debug/health?force=true", headers=alice.auth).json
    [warning] = unserved(report)
    assert warning["organization_id"] == acme_id
    assert warning["message"].startswith("Organisation acme: No online daemon serves scope=user: 1 job waits")
    assert "workspace carol/ws" in warning["message"]
    fix = "carol starts a daemon of their own: slipway provisionerd start --org acme --tag scope=user."
    assert fix in warning["message"]
    organizations = {entry["name"]: entry for entry in report["provisioners"]["organizations"]}
    assert organizations["default"]["online"] == 1 and organizations["default"]["unserved"] == []
    assert organizations["acme"]["online"] == 1
    assert [finding["example"] for finding in organizations["acme"]["unserved"]] == ["workspace carol/ws"]
    sign_in(client, alice.email, PASSWORD)
    page = client.get("/health").text
    assert 'data-organization="acme"' in page and 'data-organization="default"' in page
    assert page.index("workspace carol/ws") > page.index('data-organization="acme"')

    # Carol's own daemon in the default organisation serves none of acme's jobs; in acme it does.
    FakeDaemon(client, "carols-own", {"scope": "user"}, credential=carol.auth)
    assert [
        w["organization_id"] for w in unserved(client.get("/api/v2/debug/health?force=true", headers=alice.auth).json)
    ] == [acme_id]
    FakeDaemon(client, "carols-acme", {"scope": "user"}, credential=carol.auth, organization="acme")
    report = client.get("/api/v2/debug/health?force=true", headers=alice.auth).json
    assert unserved(report) == [] and all(entry["unserved"] == [] for entry in report["provisioners"]["organizations"])
