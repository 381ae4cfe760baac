"""Notifications: the inbox and preferences per person, and deliveries to a real SMTP server (aiosmtpd, with AUTH)
and a real webhook receiver that checks the signature, through the real RQ queue and worker code; both receivers
start down, the deliveries wait and are retried with back-off, and arrive once the receivers are up."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from aiosmtpd.controller import Controller
from flask import Flask
from rq import Queue, SimpleWorker
from rq.serializers import JSONSerializer
from sqlalchemy import select

from app.core.config import Settings
from app.core.extensions import db
from app.core.redis_client import get_redis
from app.notifications import services
from app.notifications.delivery import QUEUE, backoff, enqueue_due
from app.notifications.models import NotificationDelivery
from app.users import services as users
from app.users.tokens import issue_session_token
from tests.conftest import PASSWORD, make_settings
from tests.support.net import free_port
from tests.support.notifications import SECRET, Mailbox, Receiver, authenticate
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite", "postgresql")


@pytest.fixture
def ports() -> dict[str, int]:
    return {"smtp": free_port(), "webhook": free_port()}


@pytest.fixture
def notifying_app(
    tmp_path: Path,
    database_url: str,
    redis_server: str,
    ports: dict[str, int],
    app_factory: Callable[[Settings], Flask],
) -> Iterator[Flask]:
    settings = make_settings(
        tmp_path, database_url, redis_server,
        email_smarthost=f"127.0.0.1:{ports['smtp']}", email_from="slipway@example.com", email_username="mailer",
        email_password="mail-password", notifications_webhook_url=f"http://127.0.0.1:{ports['webhook']}/hook",
        notifications_webhook_secret=SECRET, access_url="http://slipway.example.com",
    )  # fmt: skip
    app = app_factory(settings)
    with app.app_context():
        get_redis().flushdb()
    yield app


def work(app: Flask) -> None:
    """What the notification worker process does, until the queue is empty."""
    with app.app_context():
        connection = get_redis()
        queue = Queue(QUEUE, connection=connection, serializer=JSONSerializer)
        SimpleWorker([queue], connection=connection, serializer=JSONSerializer).work(burst=True)


def deliveries(app: Flask) -> list[NotificationDelivery]:
    with app.app_context():
        rows = list(db.session.scalars(select(NotificationDelivery).order_by(NotificationDelivery.channel)))
        db.session.expunge_all()
        db.session.remove()
    return rows


def test_deliveries_wait_while_receivers_are_down_and_arrive_once_they_are_up(
    notifying_app: Flask, ports: dict[str, int]
) -> None:
    app = notifying_app
    with app.app_context():
        carol = users.create_user("carol", "carol@example.com", PASSWORD, [])
        alice = users.create_user("alice", "alice@example.com", PASSWORD, ["owner"])
        carol_token, alice_token = issue_session_token(carol, 3600), issue_session_token(alice, 3600)
        services.notify(carol.id, services.BUILD_FAILED, title="Start of dev failed", body="boom", link="/builds/1")
        db.session.commit()
        assert enqueue_due(app.config["SLIPWAY_SETTINGS"]) == 2
        db.session.remove()
    work(app)  # both receivers are down
    waiting = deliveries(app)
    assert [(row.channel, row.status, row.attempts) for row in waiting] == [
        ("email", "pending", 1),
        ("webhook", "pending", 1),
    ]
    assert all(row.last_error for row in waiting)
    assert "127.0.0.1" not in waiting[1].last_error  # a webhook error names no URL (it may carry a token)
    client = app.test_client()
    seen = client.get("/api/v2/notifications/deliveries", headers={"Authorization": f"Bearer {alice_token}"})
    assert seen.status_code == 200 and len(seen.json) == 2
    refused = client.get("/api/v2/notifications/deliveries", headers={"Authorization": f"Bearer {carol_token}"})
    assert refused.status_code == 403
    owner_page = app.test_client()
    sign_in(owner_page, "alice@example.com", PASSWORD)
    shown = owner_page.get("/workspaces/lifecycle").get_data(as_text=True)
    assert 'id="failing-deliveries"' in shown and "webhook unreachable" in shown
    # Not before their back-off: nothing is handed to the worker yet.
    with app.app_context():
        assert enqueue_due(app.config["SLIPWAY_SETTINGS"]) == 0
        db.session.remove()

    mailbox, receiver = Mailbox(), Receiver(ports["webhook"])
    smtp = Controller(
        mailbox, hostname="127.0.0.1", port=ports["smtp"], authenticator=authenticate, auth_require_tls=False
    )
    smtp.start()
    receiver.start()
    try:
        with app.app_context():
            later = max(row.next_attempt_at for row in waiting) + timedelta(seconds=1)
            assert enqueue_due(app.config["SLIPWAY_SETTINGS"], now=later) == 2
            db.session.remove()
        work(app)
    finally:
        smtp.stop()
        receiver.stop()
    assert [(row.channel, row.status, row.attempts) for row in deliveries(app)] == [
        ("email", "sent", 2),
        ("webhook", "sent", 2),
    ]
    assert len(mailbox.messages) == 1
    assert (
        "Subject: Start of dev failed" in mailbox.messages[0]
        and "http://slipway.example.com/builds/1" in mailbox.messages[0]
    )
    assert receiver.refused == 0 and receiver.received[0]["event"] == "build_failed"
    assert receiver.received[0]["user"]["username"] == "carol"


def test_back_off_doubles_up_to_an_hour() -> None:
    assert [backoff(n).total_seconds() for n in (1, 2, 3, 4)] == [10, 20, 40, 80]
    assert backoff(30) == timedelta(hours=1)


def test_inbox_and_preferences_are_each_persons_own(app: Flask, personas: dict[str, Any]) -> None:
    client = app.test_client()
    carol, dave = personas["carol"], personas["dave"]
    with app.app_context():
        services.notify(carol.id, services.WORKSPACE_AUTOSTOPPED, title="dev is being stopped on schedule")
        db.session.commit()
        db.session.remove()
    mine = client.get("/api/v2/notifications/inbox", headers=carol.auth).json
    assert [item["title"] for item in mine] == ["dev is being stopped on schedule"] and mine[0]["read_at"] is None
    assert client.get("/api/v2/notifications/inbox", headers=dave.auth).json == []
    assert client.put(f"/api/v2/notifications/inbox/{mine[0]['id']}/read", headers=dave.auth).status_code == 404
    assert client.put(f"/api/v2/notifications/inbox/{mine[0]['id']}/read", headers=carol.auth).status_code == 204
    assert client.get("/api/v2/notifications/inbox", headers=carol.auth).json[0]["read_at"] is not None

    path = "/api/v2/users/me/notifications/preferences"
    assert all(client.get(path, headers=carol.auth).json.values())
    bad = client.put(path, json={"workspace_autostopped": "no", "weather": True}, headers=carol.auth)
    assert bad.status_code == 400
    assert {item["field"] for item in bad.json["validations"]} == {"workspace_autostopped", "weather"}
    turned_off = client.put(path, json={"workspace_autostopped": False}, headers=carol.auth)
    assert turned_off.status_code == 200 and turned_off.json["workspace_autostopped"] is False
    with app.app_context():
        assert services.notify(carol.id, services.WORKSPACE_AUTOSTOPPED, title="again") is None
        assert services.notify(dave.id, services.WORKSPACE_AUTOSTOPPED, title="dave's") is not None
        db.session.commit()
        db.session.remove()
    assert len(client.get("/api/v2/notifications/inbox", headers=carol.auth).json) == 1


def self_signed(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, which the test then trusts (SSL_CERT_FILE)."""
    import ipaddress
    from datetime import UTC, datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.now(UTC)
    certificate = (
        x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
        .serial_number(x509.random_serial_number()).not_valid_before(now - timedelta(minutes=5))
        .not_valid_after(now + timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        .sign(key, hashes.SHA256())
    )  # fmt: skip
    cert_path, key_path = directory / "smtp.pem", directory / "smtp.key"
    cert_path.write_bytes(certificate.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.mark.parametrize("mode", ["starttls", "tls"])
def test_mail_goes_over_starttls_or_implicit_tls_with_auth(
    tmp_path: Path,
    database_url: str,
    redis_server: str,
    app_factory: Callable[[Settings], Flask],
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
) -> None:
    import ssl

    cert_path, key_path = self_signed(tmp_path)
    monkeypatch.setenv("SSL_CERT_FILE", str(cert_path))  # the server's certificate is the one trusted here
    server_tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_tls.load_cert_chain(cert_path, key_path)
    port, mailbox = free_port(), Mailbox()
    tls_options: dict[str, Any] = (
        {"tls_context": server_tls, "require_starttls": True, "auth_require_tls": True}
        if mode == "starttls"
        else {"ssl_context": server_tls, "auth_require_tls": False}
    )
    smtp = Controller(mailbox, hostname="127.0.0.1", port=port, authenticator=authenticate, **tls_options)
    settings = make_settings(
        tmp_path, database_url, redis_server, email_smarthost=f"127.0.0.1:{port}", email_from="slipway@example.com",
        email_username="mailer", email_password="mail-password", **{f"email_{mode}": "true"},
    )  # fmt: skip
    app = app_factory(settings)
    smtp.start()
    try:
        with app.app_context():
            get_redis().flushdb()
            dave = users.create_user("dave", "dave@example.com", PASSWORD, [])
            services.notify(dave.id, services.WORKSPACE_DELETED, title="dev is being deleted", body="dormant too long")
            db.session.commit()
            assert enqueue_due(settings) == 1
            db.session.remove()
        work(app)
    finally:
        smtp.stop()
    assert [(row.status, row.last_error) for row in deliveries(app)] == [("sent", "")]
    assert "Subject: dev is being deleted" in mailbox.messages[0]
