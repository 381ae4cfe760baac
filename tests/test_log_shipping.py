"""The daemon's log shipper against the real server app, over a network that loses replies and requests: every
line arrives once and in order, and past the cap the daemon stops sending lines but the count stays exact."""

from __future__ import annotations

import threading

import pytest
from flask import Flask
from flask.testing import FlaskClient

from protocol.logs import LogLine
from tests.conftest import Persona
from tests.support.daemon import PSK_HEADERS, FakeDaemon, running_import
from tests.support.network_faults import UnreliableNetwork
from workers.client import ProvisionerClient
from workers.logship import LogShipper

pytestmark = pytest.mark.databases("sqlite", "postgresql")


def _shipper_for(app: Flask, client: FlaskClient, personas: dict[str, Persona], network: UnreliableNetwork) -> tuple[
    LogShipper, str
]:  # fmt: skip
    daemon, job_id, version_id = running_import(client, personas)
    # retry_for=0: every failure reaches the shipper at once (a long outage, compressed).
    server = ProvisionerClient("http://slipway.test", credential=PSK_HEADERS, retry_for=0, transport=network)
    server.daemon_id = daemon.id
    return LogShipper(server, job_id, on_cancel=lambda: None), version_id


def _stored(client: FlaskClient, personas: dict[str, Persona], version_id: str) -> list[str]:
    reply = client.get(f"/api/v2/templateversions/{version_id}/logs?limit=10000", headers=personas["bob"].auth)
    return [line["output"] for line in reply.json]


def test_lost_replies_and_refused_requests_lose_and_repeat_nothing(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    network = UnreliableNetwork(app, lose_replies=3, refuse=4)
    shipper, version_id = _shipper_for(app, client, personas, network)
    outputs = [f"line {number}" for number in range(500)]
    # Flushed by hand (the shipper's thread does the same on a timer), so that every fault meets a batch.
    for start in range(0, len(outputs), 50):
        for output in outputs[start : start + 50]:
            shipper.add(LogLine(output=output))
        shipper._flush()
    with shipper:
        pass  # what is still held goes on the way out
    assert network.lose_replies == 0 and network.refuse == 0, "the faults were not all met"
    assert _stored(client, personas, version_id) == outputs


def test_past_the_cap_lines_are_counted_not_sent(app: Flask, client: FlaskClient, personas: dict[str, Persona]) -> None:
    network = UnreliableNetwork(app)
    shipper, version_id = _shipper_for(app, client, personas, network)
    total = 5_000
    with shipper:
        for _ in range(total):
            shipper.add(LogLine(output="z" * 1000))
    assert shipper.capped
    stored = _stored(client, personas, version_id)
    assert stored[-1].startswith("Log limit of 1024 KiB reached")
    kept = len(stored) - 1
    job = client.get(f"/api/v2/provisionerjobs/{shipper.job_id}", headers=personas["alice"].auth).json
    assert job["logs_dropped"] == total - kept
    # What was sent after the cap is at most what was already on its way (one flush's worth), not thousands.
    assert network.lines_sent - kept < 2_000, network.lines_sent


def test_the_count_of_lines_past_the_cap_arrives_even_when_no_batch_follows(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """The job's last flush meets the cap in its first chunk: the rest of it is never sent, and no later batch
    would carry its numbers, so the count goes at once."""
    network = UnreliableNetwork(app)
    shipper, version_id = _shipper_for(app, client, personas, network)
    total = 5_000
    for _ in range(total):
        shipper.add(LogLine(output="z" * 1000))
    shipper._flush()  # the last one: the shipping thread never runs
    kept = len(_stored(client, personas, version_id)) - 1
    job = client.get(f"/api/v2/provisionerjobs/{shipper.job_id}", headers=personas["alice"].auth).json
    assert job["logs_dropped"] == total - kept
    assert network.lines_sent < total


def test_a_job_the_server_no_longer_gives_this_daemon_is_lost_at_the_next_batch(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    shipper, version_id = _shipper_for(app, client, personas, UnreliableNetwork(app))
    lost: list[str] = []
    shipper.on_lost = lambda reason, at_once: lost.append(reason) if at_once else None
    shipper.add(LogLine(output="before"))
    shipper._flush()
    FakeDaemon(client, "d1")  # the job ends meanwhile (here: its daemon's name registering again fails it)
    shipper.add(LogLine(output="after"))
    shipper._flush()
    assert len(lost) == 1 and "already ended" in lost[0], lost
    assert shipper.lost == lost[0]
    shipper._flush()  # nothing more is sent, and on_lost is not called again
    assert len(lost) == 1 and _stored(client, personas, version_id)[0] == "before"


def test_a_daemon_out_of_touch_for_most_of_the_lease_stops_the_job_itself(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    network = UnreliableNetwork(app, refuse=10**6)  # the server is gone
    shipper, _ = _shipper_for(app, client, personas, network)
    lost = threading.Event()
    shipper.on_lost = lambda reason, at_once: None if at_once else lost.set()
    shipper.lease_seconds = 2
    with shipper:
        assert lost.wait(60), "the daemon never gave up the job"
    assert shipper.lost is not None and "has not answered" in shipper.lost
