"""Redis is the server's: daemons the operator does not trust with it wait for jobs over HTTP, and nothing read back
from Redis — a dial, a tunnel record — is believed unless the server signed it (security audit finding 1)."""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import replace
from functools import partial
from typing import Any

import pytest
import redis
from flask import Flask
from flask.testing import FlaskClient

from app.agents.tunnels import DialRequest, signed_dial, verified_dial
from app.core.signing import Signer
from app.events import get_relay
from app.events.relay import queue_key
from protocol.agentapi import Dial
from protocol.tags import daemon_queue_names
from tests.conftest import Persona
from tests.support.daemon import PSK_HEADERS, FakeDaemon, push_version
from tests.support.waiting import wait_until

pytestmark = pytest.mark.databases("sqlite", "postgresql")

WAIT = "/jobs/wait"


def _registration(client: FlaskClient, headers: dict[str, str], tags: dict[str, str] | None = None) -> Any:
    reply = client.post("/api/v2/provisionerd/register", json={"name": "d", "tags": tags or {}}, headers=headers)
    assert reply.status_code == 201, reply.json
    return reply.json


def test_a_members_daemon_gets_neither_redis_nor_queues(client: FlaskClient, personas: dict[str, Persona]) -> None:
    """The audit's attack began here: a member's user-scoped daemon was handed the server's own Redis."""
    reply = _registration(client, personas["carol"].auth, {"scope": "user"})
    assert reply["redis_url"] is None and reply["queues"] == []


def test_keys_and_the_psk_get_redis_only_when_the_operator_trusts_them(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    key = client.post("/api/v2/provisionerkeys", json={"name": "k", "tags": {}}, headers=personas["bob"].auth).json
    key_headers = {"Slipway-Provisioner-Key": key["key"]}
    assert _registration(client, PSK_HEADERS)["redis_url"] is None
    assert _registration(client, key_headers)["redis_url"] is None

    app.config["SLIPWAY_SETTINGS"] = replace(app.config["SLIPWAY_SETTINGS"], provisioner_trust_redis=("psk",))
    trusted = _registration(client, PSK_HEADERS)
    assert trusted["redis_url"] and trusted["queues"]
    assert _registration(client, key_headers)["redis_url"] is None  # only the kinds named are trusted
    # Even a trusted owner's token is a person's: user tokens never get Redis.
    assert _registration(client, personas["alice"].auth)["redis_url"] is None


def test_built_in_daemons_keep_redis(app: Flask, client: FlaskClient) -> None:
    app.config["SLIPWAY_SETTINGS"] = replace(app.config["SLIPWAY_SETTINGS"], builtin_daemon_psk="builtin-psk")
    reply = _registration(client, {"Slipway-Provisioner-PSK": "builtin-psk"})
    assert reply["redis_url"] and reply["queues"]


class Waiter(threading.Thread):
    """A daemon's POST /jobs/wait on a client of its own, so the test can queue a job meanwhile."""

    def __init__(self, app: Flask, daemon: FakeDaemon, timeout: int) -> None:
        super().__init__(daemon=True)
        self.client = app.test_client()
        self.headers = {**daemon.credential, "Slipway-Provisioner-Daemon": daemon.id}
        self.timeout = timeout
        self.reply: Any = None
        self.took = 0.0

    def run(self) -> None:
        began = time.monotonic()
        self.reply = self.client.post(
            f"/api/v2/provisionerd{WAIT}", json={"timeout_seconds": self.timeout}, headers=self.headers
        )
        self.took = time.monotonic() - began


def start_waiting(app: Flask, daemons: list[FakeDaemon], timeout: int) -> list[Waiter]:
    """Waits that have begun (each watches its queue), so a job queued next reaches them by its notice."""
    waiters = [Waiter(app, daemon, timeout) for daemon in daemons]
    for waiter in waiters:
        waiter.start()
    with app.app_context():
        relay = get_relay()
        key = queue_key(daemon_queue_names({"scope": "organization", "owner": ""}, "any")[0])
        wait_until(lambda: relay.watching(key), 30, "the waits to begin")
    return waiters


def status_of(client: FlaskClient, job_id: str, persona: Persona) -> str:
    return str(client.get(f"/api/v2/provisionerjobs/{job_id}", headers=persona.auth).json["status"])


def test_a_waiting_daemon_is_offered_the_job_as_soon_as_it_is_queued(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    daemon = FakeDaemon(client)
    (waiter,) = start_waiting(app, [daemon], timeout=60)
    version = push_version(client, personas["bob"])
    waiter.join(timeout=60)
    assert waiter.reply is not None and waiter.reply.status_code == 200, waiter.reply
    assert waiter.reply.json == {"job_id": version["job"]["id"]}
    assert waiter.took < 30  # woken by the queue notice, well before its 60 s timeout
    # Offered, not taken: the daemon acquires it as from a queue.
    assert status_of(client, version["job"]["id"], personas["bob"]) == "pending"
    job = daemon.call(f"/jobs/{version['job']['id']}/acquire")
    assert job.status_code == 200 and job.json["template_import"]["template_version_id"] == version["id"]
    shown = client.get(f"/api/v2/provisionerjobs/{version['job']['id']}", headers=personas["bob"].auth).json
    assert shown["status"] == "running" and shown["worker_id"] == daemon.id


def test_a_daemon_that_leaves_while_waiting_takes_no_job_with_it(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """A wait answered after its daemon stopped (killed, or its connection lost) must not leave the job "running"
    on nobody until the hang timeout: once the short offer lease runs out, the next daemon gets it."""
    gone = FakeDaemon(client, "gone")
    (waiter,) = start_waiting(app, [gone], timeout=60)
    job_id = push_version(client, personas["bob"])["job"]["id"]
    waiter.join(timeout=60)
    assert waiter.reply.status_code == 200  # answered, but nobody reads it: "gone" never acquires
    assert status_of(client, job_id, personas["bob"]) == "pending"
    successor = FakeDaemon(client, "successor")
    assert successor.call(WAIT, {"timeout_seconds": 60}).json == {"job_id": job_id}
    assert successor.call(f"/jobs/{job_id}/acquire").status_code == 200


def test_a_wait_with_no_job_ends_empty(app: Flask, client: FlaskClient) -> None:
    daemon = FakeDaemon(client)
    assert daemon.call(WAIT, {"timeout_seconds": 1}).status_code == 204
    assert daemon.call(WAIT, {"timeout_seconds": 0}).status_code == 204
    too_long = daemon.call(WAIT, {"timeout_seconds": 3600})
    assert too_long.status_code == 400 and too_long.json["validations"][0]["field"] == "timeout_seconds"


def test_a_waiting_daemon_is_offered_only_jobs_its_tags_allow(
    client: FlaskClient, personas: dict[str, Persona]
) -> None:
    plain_job = push_version(client, personas["bob"])["job"]
    gpu_job = push_version(client, personas["bob"], {"gpu": "a100"})["job"]
    plain = FakeDaemon(client, "plain")
    assert plain.call(WAIT, {"timeout_seconds": 1}).json == {"job_id": plain_job["id"]}
    assert plain.call(f"/jobs/{plain_job['id']}/acquire").status_code == 200
    assert plain.call(WAIT, {"timeout_seconds": 1}).status_code == 204  # the gpu job is not for it
    gpu = FakeDaemon(client, "gpu", {"gpu": "a100"})
    assert gpu.call(WAIT, {"timeout_seconds": 1}).json == {"job_id": gpu_job["id"]}


def test_a_user_scoped_daemon_waits_only_for_its_owners_jobs(client: FlaskClient, personas: dict[str, Persona]) -> None:
    bob, carol = personas["bob"], personas["carol"]
    carols = FakeDaemon(client, "carols", {"scope": "user"}, credential=carol.auth)
    push_version(client, bob)  # an organization job
    assert carols.call(WAIT, {"timeout_seconds": 1}).status_code == 204
    bobs = FakeDaemon(client, "bobs", {"scope": "user"}, credential=bob.auth)
    mine = push_version(client, bob, {"scope": "user"})["job"]
    assert carols.call(WAIT, {"timeout_seconds": 1}).status_code == 204
    assert bobs.call(WAIT, {"timeout_seconds": 1}).json == {"job_id": mine["id"]}


def test_daemons_waiting_together_are_offered_different_jobs(
    app: Flask, client: FlaskClient, personas: dict[str, Persona]
) -> None:
    """Without the offer lease every waiting daemon would be offered the oldest job, and all but one would come
    back for the next: a round trip per job per daemon when many builds start at once."""
    daemons = [FakeDaemon(client, f"d{n}") for n in range(3)]
    waiters = start_waiting(app, daemons, timeout=60)
    job_ids = {push_version(client, personas["bob"])["job"]["id"] for _ in daemons}
    for waiter in waiters:
        waiter.join(timeout=60)
    assert {waiter.reply.json["job_id"] for waiter in waiters} == job_ids
    # The same daemon asking again (its answer lost) is offered its job again; the others are not.
    first = waiters[0].reply.json["job_id"]
    assert daemons[0].call(WAIT, {"timeout_seconds": 1}).json == {"job_id": first}


def test_a_job_offered_twice_is_acquired_once(client: FlaskClient, personas: dict[str, Persona]) -> None:
    """The lease is only a courtesy between waiting daemons: acquiring decides, in the database."""
    job_id = push_version(client, personas["bob"])["job"]["id"]
    daemons = [FakeDaemon(client, f"d{n}") for n in range(2)]
    assert daemons[0].call(WAIT, {"timeout_seconds": 1}).json == {"job_id": job_id}
    assert daemons[1].call(WAIT, {"timeout_seconds": 0}).status_code == 204  # on offer to d0 for now
    statuses = sorted(daemon.call(f"/jobs/{job_id}/acquire").status_code for daemon in daemons)
    assert statuses == [200, 409]


# -- what is read back from Redis ------------------------------------------------------------------------------


def test_only_dials_the_server_signed_for_this_agent_recently_pass() -> None:
    signer = Signer("server-secret")
    dial = DialRequest(service="pty").for_tunnel("t1")
    message = signed_dial(signer, "agent-1", dial).encode()
    assert verified_dial(signer, "agent-1", message) == dial
    # What someone with write access to Redis could publish: unsigned, for another agent, with another key, late.
    assert verified_dial(signer, "agent-1", dial.dumps().encode()) is None
    assert verified_dial(signer, "agent-2", message) is None
    assert verified_dial(Signer("guessed-secret"), "agent-1", message) is None
    late = signed_dial(signer, "agent-1", dial, issued_at=time.time() - 3600).encode()
    assert verified_dial(signer, "agent-1", late) is None
    tampered = json.loads(message)
    tampered["dial"] = DialRequest(service="ssh").for_tunnel("t1").dumps()
    assert verified_dial(signer, "agent-1", json.dumps(tampered).encode()) is None
    assert verified_dial(signer, "agent-1", b"not json") is None


def test_a_control_connection_passes_each_signed_dial_on_once() -> None:
    """A signed dial read off the channel and published again while fresh would hand its copier a second tunnel."""
    from app.agents.control import ControlConnection

    connection = ControlConnection(None, "agent-1", None, heartbeat_seconds=15, secret_key="server-secret")  # type: ignore[arg-type]
    signer = Signer("server-secret")
    first = signed_dial(signer, "agent-1", DialRequest(service="ssh").for_tunnel("t1")).encode()
    connection._queue_dial(first)
    connection._queue_dial(first)
    connection._queue_dial(signed_dial(signer, "agent-1", DialRequest(service="ssh").for_tunnel("t2")).encode())
    passed = [Dial.loads(connection.dials.get_nowait()).tunnel_id for _ in range(connection.dials.qsize())]
    assert passed == ["t1", "t2"]


def test_a_dial_no_connection_heard_is_passed_on_by_the_agents_next_connection_until_answered(
    app: Flask, redis_server: str
) -> None:
    """A dial published while the agent was between control connections (its replica drained) reached nobody: the
    next connection passes it on, once, and a dial the agent has answered is not passed on again; a second answer to
    one dial (passed on by two connections) is refused."""
    from app.agents import tunnels
    from app.agents.control import ControlConnection

    secret = app.config["SLIPWAY_SETTINGS"].secret_key
    signer = Signer(secret)
    agent_id = str(uuid.uuid4())
    with redis.Redis.from_url(redis_server) as client:
        unheard = tunnels.dial(client, signer, agent_id, DialRequest(service="ssh"))
        answered = tunnels.dial(client, signer, agent_id, DialRequest(service="ssh"))
        assert tunnels.take_agent_half(client, answered.tunnel_id)
        tunnels.agent_half(client, answered.tunnel_id, None)
        assert tunnels.wait_open(answered, timeout=5) is None
        assert not tunnels.take_agent_half(client, answered.tunnel_id)  # the agent answered it already

        pending = partial(tunnels.pending_dials, client, agent_id)
        connection = ControlConnection(None, agent_id, None, 15, secret, pending_dials=pending)  # type: ignore[arg-type]
        connection._pass_on_pending_dials()
        connection._queue_dial(pending()[0])  # the same dial heard on the channel as well
        passed = [Dial.loads(connection.dials.get_nowait()).tunnel_id for _ in range(connection.dials.qsize())]
        assert passed == [unheard.tunnel_id]
        assert tunnels.wait_open(unheard, timeout=0.1) is not None  # given up: no connection passes it on any more
        assert pending() == []


@pytest.mark.parametrize("forged", ["{agent}", "{agent}.", "{agent}.0123abcd"])
def test_an_agent_takes_a_tunnel_only_with_the_servers_record_of_it(app: Flask, redis_server: str, forged: str) -> None:
    """The tunnel's other half is handed only to the agent the server dialed: a record written into Redis by
    anyone else (the audit wrote `slipway:tunnel:<T>:agent=<agent id>`) is not the server's."""
    from app.agents.tunnels import dialed_to

    signer = Signer(app.config["SLIPWAY_SETTINGS"].secret_key)
    with redis.Redis.from_url(redis_server) as client:
        client.set("slipway:tunnel:T1:agent", forged.format(agent="agent-1"), ex=60)
        assert not dialed_to(client, signer, "T1", "agent-1")
        client.set("slipway:tunnel:T2:agent", f"agent-1.{signer.sign('tunnel', 'T2', 'agent-1')}", ex=60)
        assert dialed_to(client, signer, "T2", "agent-1")
        assert not dialed_to(client, signer, "T2", "agent-2")
