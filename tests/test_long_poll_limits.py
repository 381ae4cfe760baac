"""Long polls count against the live-connection caps like streams: an agent's
``GET /workspaceagents/me/external-auth?listen=true`` (held up to 50 s, looking at the database every second) and
a person's daemon's ``POST /provisionerd/jobs/wait`` (up to a minute) each hold one of the person's live slots
while they wait, give it back when they answer, and get a 429 once the person's slots are all taken."""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from app.core.config import Settings, draining_marker
from app.core.extensions import db
from app.core.limits import LiveSlots, Slot, holders, person_budgets
from app.externalauth.models import ExternalAuthLink
from tests.conftest import Persona, make_settings
from tests.support.daemon import PSK, FakeDaemon, import_template, push_version
from tests.support.waiting import wait_until

pytestmark = pytest.mark.databases("sqlite", "postgresql")

PER_USER = 3
AGENT_TOKEN = "5c0ffee0-0000-4000-8000-00000000b0b0"
AGENT_HEADERS = {"Slipway-Agent-Token": AGENT_TOKEN}
LISTEN = "/api/v2/workspaceagents/me/external-auth?id=git&listen=true"


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str) -> Settings:
    # A Git provider the agent can ask for (nothing needs to answer at its URLs: no link means no call to it).
    provider = {
        "ID": "git", "TYPE": "gitlab", "CLIENT_ID": "x", "CLIENT_SECRET": "y",
        "AUTH_URL": "http://127.0.0.1:9/oauth/authorize", "TOKEN_URL": "http://127.0.0.1:9/oauth/token",
    }  # fmt: skip
    return make_settings(
        tmp_path, database_url, redis_server, provisioner_daemon_psk=PSK,
        max_live_connections_per_user=str(PER_USER), max_live_connections_per_agent="50",
        **{f"EXTERNAL_AUTH_0_{key}": value for key, value in provider.items()},
    )  # fmt: skip


@pytest.fixture
def ledger(redis_server: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server)
    yield client
    client.close()


def fill_budget(ledger: redis.Redis, settings: Settings, user_id: str) -> list[Slot]:
    """Every live slot of the person taken (as by their open log streams in another web worker)."""
    other_worker = LiveSlots(ledger)
    return [other_worker.take(person_budgets(settings, user_id)) for _ in range(PER_USER)]


def in_thread(call: Any) -> tuple[threading.Thread, list[Any]]:
    answers: list[Any] = []
    thread = threading.Thread(target=lambda: answers.append(call()), daemon=True)
    thread.start()
    return thread, answers


def carols_agent(client: FlaskClient, personas: dict[str, Persona]) -> None:
    daemon = FakeDaemon(client)
    template = import_template(client, personas, daemon)
    body = {"template_id": template["id"], "name": "ws", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    created = client.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth)
    job_id = created.json["latest_build"]["job"]["id"]
    assert daemon.call(f"/jobs/{job_id}/acquire").status_code == 200
    agent = {"name": "main", "os": "linux", "arch": "amd64", "token": AGENT_TOKEN}
    resources = [{"name": "dev", "type": "terraform_data", "agents": [agent]}]
    done = {"workspace_build": {"state": base64.b64encode(b"{}").decode(), "resources": resources}}
    assert daemon.call(f"/jobs/{job_id}/complete", done).status_code == 204


def test_an_agents_listen_for_a_git_link_holds_a_slot_of_its_owner(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], settings: Settings, ledger: redis.Redis
) -> None:
    carol = personas["carol"].id
    carols_agent(client, personas)
    taken = fill_budget(ledger, settings, carol)
    refused = client.get(LISTEN, headers=AGENT_HEADERS)
    assert refused.status_code == 429, refused.json
    assert "live streams open" in refused.json["message"]
    # Without listen the request answers at once (the link URL): it is no long poll and takes no slot.
    assert client.get("/api/v2/workspaceagents/me/external-auth?id=git", headers=AGENT_HEADERS).status_code == 200
    for slot in taken:
        slot.release()

    thread, answers = in_thread(lambda: app.test_client().get(LISTEN, headers=AGENT_HEADERS))
    wait_until(lambda: holders(ledger, f"user:{carol}") == 1, what="the listen to hold carol's slot")
    assert holders(ledger, "all") == 1
    with app.app_context():  # carol links meanwhile: the listen answers with her token
        db.session.add(ExternalAuthLink(user_id=carol, provider_id="git", access_token="t0ken-of-carol"))
        db.session.commit()
        db.session.remove()
    thread.join(timeout=30)
    assert answers and answers[0].status_code == 200 and answers[0].json["access_token"] == "t0ken-of-carol"
    assert holders(ledger, f"user:{carol}") == 0 and holders(ledger, "all") == 0


def test_a_persons_daemon_waiting_for_a_job_holds_one_of_their_slots(
    app: Flask, client: FlaskClient, personas: dict[str, Persona], settings: Settings, ledger: redis.Redis
) -> None:
    bob = personas["bob"]
    daemon = FakeDaemon(client, "bobs", tags={"scope": "user"}, credential=bob.auth)
    taken = fill_budget(ledger, settings, bob.id)
    refused = daemon.call("/jobs/wait", {"timeout_seconds": 30})
    assert refused.status_code == 429, refused.json
    for slot in taken:
        slot.release()

    waiter = FakeDaemon(app.test_client(), "bobs-2", tags={"scope": "user"}, credential=bob.auth)
    thread, answers = in_thread(lambda: waiter.call("/jobs/wait", {"timeout_seconds": 60}))
    wait_until(lambda: holders(ledger, f"user:{bob.id}") == 1, what="the wait to hold bob's slot")
    # A job for bob's own daemons ends the wait.
    version = push_version(client, bob, tags={"scope": "user"})
    thread.join(timeout=60)
    assert answers and answers[0].status_code == 200, answers
    assert answers[0].json["job_id"] == version["job"]["id"]
    assert holders(ledger, f"user:{bob.id}") == 0


def test_the_operators_daemons_are_not_counted(client: FlaskClient, ledger: redis.Redis) -> None:
    daemon = FakeDaemon(client)  # the PSK: the operator's, as are provisioner keys and the built-in daemons
    assert daemon.call("/jobs/wait", {"timeout_seconds": 0}).status_code == 204
    assert holders(ledger, "all") == 0


def test_a_draining_replica_ends_a_daemons_wait_for_a_job_before_it_stops(
    app: Flask, settings: Settings, ledger: redis.Redis
) -> None:
    daemon = FakeDaemon(app.test_client())
    thread, answers = in_thread(lambda: daemon.call("/jobs/wait", {"timeout_seconds": 60}))
    draining_marker(settings.data_dir).touch()  # SIGTERM: the replica drains
    thread.join(timeout=45)  # ends within a recheck (5 s), not at the poll's minute
    assert answers and answers[0].status_code == 204, answers
    # A daemon asking a draining replica is answered after one look.
    assert daemon.call("/jobs/wait", {"timeout_seconds": 60}).status_code == 204
