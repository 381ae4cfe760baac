"""One member cannot stop a real server with live log streams: caps per person and overall, counted in Redis.

The server runs with small caps and few connection slots (2 workers x 100), so a flood of a few hundred streams
would fill every slot without the caps: then /healthz and sign-in stop answering.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from tests.conftest import PASSWORD
from tests.support.http_daemon import HttpDaemon, api_client, new_version, sign_up_owner
from tests.support.net import read_all_at_once
from tests.support.server import ServerProcess

PSK = "live-limits-psk"
PER_USER = 10
OVERALL = 15
FLOOD = 300


@dataclass
class World:
    server: ServerProcess
    owner: httpx.Client
    template_id: str

    def member(self, name: str) -> str:
        """A new member's session token."""
        body = {"username": name, "email": f"{name}@example.com", "password": PASSWORD, "roles": []}
        assert self.owner.post("/users", json=body).status_code == 201
        reply = httpx.post(
            f"{self.server.url}/api/v2/users/login", json={"email": f"{name}@example.com", "password": PASSWORD}
        )
        assert reply.status_code == 201, reply.text
        return str(reply.json()["session_token"])

    def pending_build(self, token: str, name: str) -> str:
        """A build of the member's that stays pending (no daemon takes it), so its log stream stays open."""
        with api_client(self.server.url, token) as api:
            reply = api.post("/workspaces", json={"template_id": self.template_id, "name": name})
            assert reply.status_code == 201, reply.text
            return str(reply.json()["latest_build"]["id"])

    def cancel(self, token: str, build_id: str) -> None:
        """Cancel the build: its streams end with `end`, and give their slots back at once."""
        with api_client(self.server.url, token) as api:
            assert api.patch(f"/workspacebuilds/{build_id}/cancel").status_code == 200


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    data = tmp_path_factory.mktemp("live-limits") / "data"
    env = {
        "SLIPWAY_PROVISIONER_DAEMON_PSK": PSK,
        "SLIPWAY_WEB_WORKER_CONNECTIONS": "100",
        "SLIPWAY_MAX_LIVE_CONNECTIONS_PER_USER": str(PER_USER),
        "SLIPWAY_MAX_LIVE_CONNECTIONS": str(OVERALL),
        # The flood comes from one address: only the stream caps may stop it here (tests/test_slowloris.py has
        # the per-address limit).
        "SLIPWAY_MAX_CONNECTIONS_PER_CLIENT": "0",
    }
    with ServerProcess(data, "--provisioner-daemons", "0", env=env, start_timeout=120) as server:
        owner = api_client(server.url, sign_up_owner(server.url, PASSWORD))
        version = new_version(owner)
        daemon = HttpDaemon(server.url, PSK)
        assert daemon.call(f"/jobs/{version['job']['id']}/acquire").status_code == 200
        assert daemon.call(f"/jobs/{version['job']['id']}/complete", {"template_import": {}}).is_success
        daemon.close()
        template = owner.post("/templates", json={"name": "t", "version_id": version["id"]})
        assert template.status_code == 201, template.text
        yield World(server, owner, template.json()["id"])
        owner.close()


def stream_request(build_id: str, token: str) -> bytes:
    return (
        f"GET /api/v2/workspacebuilds/{build_id}/logs?follow=true HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Authorization: Bearer {token}\r\n\r\n"
    ).encode()


@dataclass
class Flood:
    """An attacker's sockets, each asking for a stream, never closed by the attacker; sorted by the answer."""

    streams: list[socket.socket]
    refused: list[bytes]  # the whole answer of each refused request (the server closed those connections)
    unanswered: int

    def close(self) -> None:
        for sock in self.streams:
            sock.close()

    def read_to_the_end(self, timeout: float = 30) -> None:
        """Once their build ended: each stream ends with `end`, and its slot is given back before the close."""
        deadline = time.monotonic() + timeout
        for sock in self.streams:
            sock.settimeout(max(deadline - time.monotonic(), 0.1))
            received = b""
            while not received.endswith(b"\r\n0\r\n\r\n"):  # the last chunk of the response
                data = sock.recv(65536)
                assert data, "the stream ended without its last chunk"
                received += data


def flood(port: int, request: bytes, count: int, timeout: float = 60) -> Flood:
    """``count`` connections that each send ``request`` at once; returns once each is a stream or was refused."""
    sockets = [socket.create_connection(("127.0.0.1", port)) for _ in range(count)]
    for sock in sockets:
        sock.sendall(request)

    def settled(data: bytes, closed: bool) -> bool:
        # A stream once its first bytes came; a refusal once the server closed the connection.
        return closed or (data.startswith(b"HTTP/1.1 200") and b": connected" in data)

    reads = read_all_at_once(sockets, settled, timeout)
    received, closed = reads.received, reads.closed
    streams = [sock for sock in sockets if sock not in closed and settled(received[sock], False)]
    for sock in sockets:
        sock.setblocking(True)
        if sock in closed:
            sock.close()
    return Flood(streams, [received[sock] for sock in sockets if sock in closed], count - len(closed) - len(streams))


def test_a_member_flooding_streams_is_capped_and_the_server_keeps_answering(world: World) -> None:
    carol, dave = world.member("carol"), world.member("dave")
    carol_build, dave_build = world.pending_build(carol, "flood"), world.pending_build(dave, "calm")
    attack = flood(world.server.port, stream_request(carol_build, carol), FLOOD)
    try:
        assert (len(attack.streams), len(attack.refused), attack.unanswered) == (PER_USER, FLOOD - PER_USER, 0)
        message = b"You have 10 live streams open (log streams, terminals, tunnels); close some tabs and try again."
        for answer in attack.refused:  # each refused at once, and its connection closed: it holds no slot
            assert answer.startswith(b"HTTP/1.1 429") and b"Connection: close" in answer and message in answer

        # While carol holds her streams: health checks, sign-in and other people's streams answer.
        for _ in range(3):
            assert httpx.get(f"{world.server.url}/healthz", timeout=10).text == "OK\n"
        login = httpx.post(
            f"{world.server.url}/api/v2/users/login",
            json={"email": "carol@example.com", "password": PASSWORD},
            timeout=10,
        )
        assert login.status_code == 201
        with api_client(world.server.url, dave) as api:
            dave_stream = open_stream(api, dave_build)
            assert dave_stream.status_code == 200
            world.cancel(dave, dave_build)
            finish(dave_stream)
        with api_client(world.server.url, carol) as api:
            refused = api.get(f"/workspacebuilds/{carol_build}/logs?follow=true", timeout=10)
        assert refused.status_code == 429 and refused.json() == {"message": message.decode()}
    finally:
        world.cancel(carol, carol_build)
        attack.read_to_the_end()
        attack.close()

    # Streams that end give their slots back: carol may open as many again.
    again = world.pending_build(carol, "again")
    with api_client(world.server.url, carol) as api:
        streams = [open_stream(api, again) for _ in range(PER_USER)]
        assert [response.status_code for response in streams] == [200] * PER_USER
        world.cancel(carol, again)
        for response in streams:
            finish(response)


def open_stream(api: httpx.Client, build_id: str) -> httpx.Response:
    return api.send(api.build_request("GET", f"/workspacebuilds/{build_id}/logs?follow=true"), stream=True)


def finish(response: httpx.Response) -> None:
    """Read the stream to its end (its slot is given back before the server ends the response), then close."""
    try:
        for _ in response.iter_raw():
            pass
    finally:
        response.close()


def test_everyones_streams_together_are_capped(world: World) -> None:
    erin, frank = world.member("erin"), world.member("frank")
    erin_build, frank_build = world.pending_build(erin, "e"), world.pending_build(frank, "f")
    with api_client(world.server.url, erin) as erin_api, api_client(world.server.url, frank) as frank_api:
        streams = [open_stream(erin_api, erin_build) for _ in range(PER_USER)]
        streams += [open_stream(frank_api, frank_build) for _ in range(OVERALL - PER_USER)]
        try:
            assert [response.status_code for response in streams] == [200] * OVERALL
            over = frank_api.get(f"/workspacebuilds/{frank_build}/logs?follow=true")  # frank has room, the server not
            assert over.status_code == 429
            assert over.json()["message"] == (
                f"The server has {OVERALL} live streams and connections open, its limit; try again in a minute."
            )
            assert httpx.get(f"{world.server.url}/healthz", timeout=10).text == "OK\n"
        finally:
            world.cancel(erin, erin_build)
            world.cancel(frank, frank_build)
            for response in streams:
                finish(response)
