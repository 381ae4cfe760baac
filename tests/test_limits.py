"""Live connection limits in-process: the slot ledger in a real Redis, bounded streams, and the 429 they answer."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest
import redis
from flask import Flask, g
from flask.testing import FlaskClient

from app.core.config import Settings
from app.core.limits import (
    AGENT_LIFELINE_RESERVE,
    RESUME_MARKER,
    BoundedStream,
    Budget,
    LiveConnectionsFull,
    LiveSlots,
    Slot,
    holders,
    request_budgets,
)
from tests.conftest import PASSWORD, Persona, make_settings
from tests.support.daemon import FakeDaemon, import_template
from tests.support.waiting import wait_until
from tests.support.web import sign_in

pytestmark = pytest.mark.databases("sqlite")

PER_USER = 2


@pytest.fixture
def settings(tmp_path: Path, database_url: str, redis_server: str) -> Settings:
    return make_settings(
        tmp_path,
        database_url,
        redis_server,
        provisioner_daemon_psk="test-daemon-psk",
        max_live_connections_per_user=str(PER_USER),
        max_live_connections_per_agent="3",
    )


@pytest.fixture
def ledger(redis_server: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_server)
    client.flushdb()
    yield client
    client.close()


def test_slots_are_shared_by_processes_and_refused_beyond_the_cap(ledger: redis.Redis) -> None:
    first, second = LiveSlots(ledger), LiveSlots(ledger)  # two web workers (or replicas) on one Redis
    budget = [Budget("user:u1", 3, "You have {count} of {cap}.")]
    held = [first.take(budget), second.take(budget), first.take(budget)]
    with pytest.raises(LiveConnectionsFull, match="You have 3 of 3."):
        second.take(budget)
    assert holders(ledger, "user:u1") == 3
    held[1].release()
    held[1].release()  # idempotent
    assert holders(ledger, "user:u1") == 2
    held.append(second.take(budget))
    for slot in held:
        slot.release()
    assert holders(ledger, "user:u1") == 0


def test_a_full_budget_takes_no_slot_in_the_others(ledger: redis.Redis) -> None:
    slots = LiveSlots(ledger)
    slots.take([Budget("user:full", 1, "full")])
    with pytest.raises(LiveConnectionsFull, match="full"):
        slots.take([Budget("all", 10, "everyone"), Budget("user:full", 1, "full")])
    assert holders(ledger, "all") == 0


def test_the_slots_of_a_process_that_died_expire(ledger: redis.Redis) -> None:
    crashed = LiveSlots(ledger, ttl=1, renew_every=3600)  # never renews: as if its process were killed
    budget = [Budget("user:u2", 1, "full")]
    crashed.take(budget)
    survivor = LiveSlots(ledger)
    with pytest.raises(LiveConnectionsFull):
        survivor.take(budget)

    def taken() -> bool:
        try:
            survivor.take(budget).release()
        except LiveConnectionsFull:
            return False
        return True

    wait_until(taken, what="the dead process's slot expired")


def test_held_slots_are_renewed_beyond_their_ttl(ledger: redis.Redis) -> None:
    slots = LiveSlots(ledger, ttl=1, renew_every=0.2)
    slot = slots.take([Budget("user:u3", 5, "full")])
    seconds, _ = ledger.time()
    wait_until(lambda: ledger.time()[0] >= seconds + 3, what="three seconds of Redis time")
    assert holders(ledger, "user:u3") == 1
    slot.release()
    assert holders(ledger, "user:u3") == 0


def test_connections_are_let_through_uncounted_while_redis_is_away(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with redis.Redis.from_url(f"unix://{tmp_path}/no-redis.sock", socket_connect_timeout=1) as gone:
        slots = LiveSlots(gone)
        first, second = slots.take([Budget("user:u4", 1, "full")]), slots.take([Budget("user:u4", 1, "full")])
        assert first.keys == () and second.keys == ()
        first.release()
    assert caplog.text.count("Redis did not answer") == 1  # one line per outage, not one per connection


def test_an_agents_control_connection_may_use_the_slots_its_tunnels_may_not(app: Flask, ledger: redis.Redis) -> None:
    settings: Settings = app.config["SLIPWAY_SETTINGS"]
    slots = LiveSlots(ledger)
    with app.test_request_context("/api/v2/workspaceagents/me/rpc"):
        g.agent = SimpleNamespace(id="agent-1")
        tunnels = request_budgets(settings)
        lifeline = request_budgets(settings, lifeline=True)
    assert [budget.key for budget in tunnels] == ["agent:agent-1"]  # never a person's budget, nor everyone's
    for _ in range(settings.max_live_connections_per_agent):
        slots.take(tunnels)
    with pytest.raises(LiveConnectionsFull, match="This workspace agent has 3 connections open"):
        slots.take(tunnels)
    for _ in range(AGENT_LIFELINE_RESERVE):
        slots.take(lifeline)


def test_a_person_counts_against_their_own_budget_and_everyones(app: Flask, personas: dict[str, Persona]) -> None:
    with app.test_request_context("/api/v2/workspacebuilds/x/logs", headers=personas["carol"].auth):
        from app.auth.access import api_user

        api_user()
        keys = [budget.key for budget in request_budgets(app.config["SLIPWAY_SETTINGS"])]
    assert keys == [f"user:{personas['carol'].id}", "all"]
    with app.test_request_context("/@alice/ws/apps/web/", environ_base={"REMOTE_ADDR": "192.0.2.7"}):
        keys = [budget.key for budget in request_budgets(app.config["SLIPWAY_SETTINGS"])]
    assert keys == ["address:192.0.2.7", "all"]  # a visitor of a public app


def _events(*chunks: str, closed: list[bool]) -> Iterator[str]:
    try:
        yield from chunks
        while True:
            yield ": heartbeat\n\n"
    finally:
        closed.append(True)


def test_a_stream_past_its_lifetime_ends_with_a_retry_hint_and_frees_its_slot() -> None:
    closed: list[bool] = []
    slot = Slot("s1", ())
    stream = BoundedStream(_events("id: 7\nevent: log\ndata: {}\n\n", closed=closed), slot, 0.3, has_ids=False)
    chunks = list(stream)  # ends on its own: the heartbeats never stop
    assert chunks[0].startswith("id: 7") and chunks[-1].endswith("retry: 1000\n\n")
    assert "id:" not in chunks[-1]  # it carries ids: EventSource resends the last one, 7
    assert closed == [True] and slot.released


def test_a_stream_without_ids_marks_its_reconnect() -> None:
    closed: list[bool] = []
    chunks = list(BoundedStream(_events("event: refresh\ndata: changed\n\n", closed=closed), Slot("s2", ()), 0.2,
                                has_ids=False))  # fmt: skip
    assert chunks[-1].endswith(f"id: {RESUME_MARKER}\nretry: 1000\n\n")
    # A stream resumed with a real event id keeps it, even if no new line came on this connection.
    again = list(BoundedStream(_events(closed=closed), Slot("s3", ()), 0.2, has_ids=True))
    assert "id:" not in again[-1]


def test_a_stream_of_a_draining_replica_ends_at_its_next_event_with_a_retry_hint(tmp_path: Path) -> None:
    closed: list[bool] = []
    marker = tmp_path / "draining"
    stream = BoundedStream(_events("id: 7\nevent: log\ndata: {}\n\n", closed=closed), Slot("s5", ()), 3600,
                           has_ids=True, draining=marker)  # fmt: skip
    assert next(stream).startswith("id: 7") and next(stream) == ": heartbeat\n\n"
    marker.touch()  # SIGTERM: the server starts draining
    assert next(stream).endswith("retry: 1000\n\n") and closed == [True]
    assert list(stream) == []


def test_a_stream_closed_before_its_first_event_frees_its_slot() -> None:
    slot = Slot("s4", ())
    stream = BoundedStream(_events(closed=[]), slot, 60, has_ids=False)
    del stream
    gc.collect()
    assert slot.released


def _member_build(app: Flask, personas: dict[str, Persona]) -> str:
    """A build of carol's that stays pending, so following its log keeps a stream open."""
    api = app.test_client()
    template = import_template(api, personas, FakeDaemon(api))
    body = {"template_id": template["id"], "name": "ws", "rich_parameter_values": [{"name": "region", "value": "eu"}]}
    reply = api.post("/api/v2/workspaces", json=body, headers=personas["carol"].auth)
    assert reply.status_code == 201, reply.json
    return str(reply.json["latest_build"]["id"])


def test_a_member_beyond_the_cap_gets_429_saying_why(app: Flask, personas: dict[str, Persona]) -> None:
    build_id = _member_build(app, personas)
    api, carol = app.test_client(), personas["carol"].auth
    path = f"/api/v2/workspacebuilds/{build_id}/logs?follow=true"
    held = [api.get(path, headers=carol, buffered=False) for _ in range(PER_USER)]
    assert [response.status_code for response in held] == [200] * PER_USER
    refused = api.get(path, headers=carol)
    assert refused.status_code == 429
    assert refused.json == {
        "message": f"You have {PER_USER} live streams open (log streams, terminals, tunnels); close some tabs and "
        "try again."
    }
    assert refused.headers["Retry-After"] == "10"
    held.pop().close()  # a stream that ends gives its slot back
    again = api.get(path, headers=carol, buffered=False)
    assert again.status_code == 200
    # Last opened, first closed: in one thread, each suspended stream keeps its request context pushed.
    for response in reversed([*held, again]):
        response.close()
    with app.app_context():
        from app.core.redis_client import get_redis

        assert holders(get_redis(), f"user:{personas['carol'].id}") == 0


def test_a_refused_page_stream_gets_the_message_on_a_page(app: Flask, personas: dict[str, Persona]) -> None:
    build_id = _member_build(app, personas)
    browser = app.test_client()
    sign_in(browser, "carol@example.com", PASSWORD)
    held = [browser.get(f"/builds/{build_id}/log/stream", buffered=False) for _ in range(PER_USER)]
    refused = browser.get(f"/builds/{build_id}/log/stream")
    assert refused.status_code == 429 and "close some tabs" in refused.get_data(as_text=True)
    assert refused.mimetype == "text/html"
    for response in reversed(held):
        response.close()


def test_a_status_page_that_comes_back_after_the_lifetime_rechecks_at_once(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    sign_in(client, "carol@example.com", PASSWORD)
    resumed = client.get("/workspaces/events", headers={"Last-Event-ID": RESUME_MARKER}, buffered=False)
    received = b""
    for chunk in resumed.response:  # the first event comes at once, not at the next change or heartbeat
        received += chunk
        if b"event:" in received:
            break
    assert received.startswith(b": connected") and b"event: refresh\ndata: changed" in received
    resumed.close()
