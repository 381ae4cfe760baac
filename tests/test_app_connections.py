"""Keep-alive connections to apps (app/agents/app_connections.py): reused, kept apart per person, bounded, and let go
of when the app, the tunnel or the agent closes them.

Real Redis tunnels and a real HTTP/1.1 app on this machine; the agent's part of each tunnel is played in-process by
the server's own tunnel code (it takes the signed dial, connects to the app and relays), as the real agent does
over its WebSocket (the whole path runs end to end in bench/apps.py and the e2e modules). The app answers with the
port its connection comes from, so that each answer names the connection that carried it.
"""

from __future__ import annotations

import select
import socket
import threading
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace
from typing import Any, cast

import flask
import pytest
import redis

from app.agents import tunnels
from app.agents.app_connections import AppConnection, AppUnavailable, ConnectionPool, PoolKey
from app.agents.apps import AppTarget
from app.agents.proxy import REPLAYABLE_BODY_BYTES, AppRequestPath, proxy_http
from app.agents.tunnels import Holder, SocketEndpoint, agent_half, relay, verified_dial
from app.core.signing import Signer
from protocol.agentapi import CLOSE_ACCESS_REVOKED, CLOSE_SERVER_RESTARTING
from protocol.channels import AGENT_CONTROL_CHANNEL_PREFIX

WAIT = 30.0  # seconds: a bound on waits for events, never a sleep
CONCURRENT = 8


@dataclass
class AppState:
    """What the app is told to do next, and the sockets of its open connections."""

    drop_next_reused: bool = False
    # Called instead of answering the next request: the tunnel that carried it ends as the test says.
    end_next_tunnel: Callable[[], None] | None = None
    together: threading.Barrier = field(default_factory=lambda: threading.Barrier(CONCURRENT))
    connections: list[socket.socket] = field(default_factory=list)


class AppHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: AppServer

    def setup(self) -> None:
        super().setup()
        self.served = 0
        self.server.state.connections.append(self.connection)

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.answer(b"")

    def do_POST(self) -> None:
        self.answer(self.rfile.read(int(self.headers["Content-Length"])))

    def answer(self, body: bytes) -> None:
        state = self.server.state
        self.served += 1
        if state.drop_next_reused and self.served > 1:  # closed as the request arrived, before any answer
            state.drop_next_reused = False
            self.close_connection = True
            return
        if state.end_next_tunnel is not None:
            end_tunnel, state.end_next_tunnel = state.end_next_tunnel, None
            end_tunnel()
            self.close_connection = True
            return
        if self.path == "/together":
            state.together.wait(WAIT)
        text = f"{self.client_address[1]} {self.command} {self.path} {len(body)}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(text)))
        if self.path == "/close":
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(text)


class AppServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), AppHandler)
        self.state = AppState()

    def close_idle_connections(self) -> None:
        for sock in self.state.connections:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class StandInAgent:
    """The agent's end of tunnels: each signed dial on its control channel is connected to the app and relayed."""

    def __init__(self, client: redis.Redis, signer: Signer, agent_id: str) -> None:
        self.client, self.signer, self.agent_id = client, signer, agent_id
        self.dials: list[str] = []
        self.halves: list[tunnels.TunnelHalf] = []
        self.relays: list[threading.Thread] = []
        self._stop = threading.Event()
        self._pubsub = client.pubsub()
        self._pubsub.subscribe(AGENT_CONTROL_CHANNEL_PREFIX + agent_id)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            message = self._pubsub.get_message(ignore_subscribe_messages=True, timeout=0.2)
            dial = verified_dial(self.signer, self.agent_id, message["data"]) if message else None
            if dial is None:
                continue
            self.dials.append(dial.tunnel_id)
            app = socket.create_connection((dial.host, dial.port))
            half = agent_half(self.client, dial.tunnel_id, None)
            self.halves.append(half)
            relaying = threading.Thread(target=self._relay, args=(app, half), daemon=True)
            self.relays.append(relaying)
            relaying.start()

    @staticmethod
    def _relay(app: socket.socket, half: tunnels.TunnelHalf) -> None:
        with app:
            relay(SocketEndpoint(app), half)

    def go_away(self) -> None:
        """As when the agent's process ends: each of its tunnels is closed from its side."""
        for half in self.halves:
            half.push(tunnels.CLOSE + tunnels.close_item(1001, "agent gone"))

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(WAIT)
        self._pubsub.close()
        for relaying in self.relays:  # each ends once the proxy's side has closed
            relaying.join(WAIT)


@dataclass
class Setting:
    client: redis.Redis
    signer: Signer
    app: AppServer
    agent: StandInAgent
    target: AppTarget
    flask_app: flask.Flask

    def key(self, viewer: str = "alice", holder: Holder | None = None) -> PoolKey:
        return PoolKey.of(self.target, viewer, holder)

    def request(self, pool: ConnectionPool, key: PoolKey, path: str, body: bytes = b"") -> str:
        """The app's answer to one request through the proxy, read to the end as a browser would."""
        method = "POST" if body else "GET"
        with self.flask_app.test_request_context(path, method=method, data=body):
            requested = AppRequestPath("/", path.lstrip("/"), "")
            response = proxy_http(
                self.client, self.signer, self.target, flask.request, requested, pool=pool, key=key, sandbox=False
            )
            text = b"".join(response.response).decode()  # type: ignore[arg-type]  # an iterable of bytes
            response.close()
        assert response.status_code == 200, text
        return text


def port_of(answer: str) -> str:
    """Which of the app's connections carried the answer."""
    return answer.split()[0]


@pytest.fixture
def setting(redis_server: str) -> Iterator[Setting]:
    with redis.Redis.from_url(redis_server) as client:
        signer, agent_id = Signer("app-connections-test"), str(uuid.uuid4())
        app = AppServer()
        threading.Thread(target=app.serve_forever, daemon=True).start()
        agent = StandInAgent(client, signer, agent_id)
        target = SimpleNamespace(
            agent=SimpleNamespace(id=agent_id), scheme="http", host="127.0.0.1", port=app.server_address[1]
        )
        target.base_path = ""
        try:
            yield Setting(client, signer, app, agent, cast(AppTarget, target), flask.Flask(__name__))
        finally:
            agent.stop()
            app.shutdown()
            app.server_close()


class RecordingPool(ConnectionPool):
    """A pool that remembers every connection it opened, so that a test can end their relays before the Redis
    client they read from is closed (a relay still reading then dies in redis-py with "I/O operation on closed
    file", reported against whichever test runs next)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.opened: list[AppConnection] = []

    def open(self, *args: Any, **kwargs: Any) -> AppConnection:
        connection = super().open(*args, **kwargs)
        self.opened.append(connection)
        return connection


@pytest.fixture
def pool(setting: Setting) -> Iterator[ConnectionPool]:
    opened = RecordingPool(per_key=6, total=10)
    yield opened
    opened.close()
    for connection in opened.opened:
        connection.close()
    for connection in opened.opened:
        assert connection.tunnel.ended.wait(timeout=30), "a relay did not end after its connection closed"


def test_the_next_request_of_the_same_person_reuses_the_connection(setting: Setting, pool: ConnectionPool) -> None:
    key = setting.key()
    answers = [setting.request(pool, key, f"/n{index}") for index in range(5)]
    assert [answer.split()[2] for answer in answers] == ["/n0", "/n1", "/n2", "/n3", "/n4"]
    assert len({port_of(answer) for answer in answers}) == 1, answers
    assert len(setting.agent.dials) == 1
    assert pool.idle_count(key) == 1
    # A small body is sent on the kept connection too.
    assert setting.request(pool, key, "/form", b"a=1").split()[1:] == ["POST", "/form", "3"]
    assert len(setting.agent.dials) == 1


def test_people_never_share_a_connection(setting: Setting, pool: ConnectionPool) -> None:
    alice, carol = setting.key("alice"), setting.key("carol")
    first = port_of(setting.request(pool, alice, "/"))
    assert port_of(setting.request(pool, carol, "/")) != first
    assert port_of(setting.request(pool, alice, "/")) == first
    assert pool.idle_count(alice) == pool.idle_count(carol) == 1


def test_concurrent_requests_each_get_a_connection_and_the_pool_keeps_a_bounded_few(
    setting: Setting, pool: ConnectionPool
) -> None:
    key = setting.key()
    answers: list[str] = []
    failures: list[BaseException] = []

    def one() -> None:
        try:
            answers.append(setting.request(pool, key, "/together"))  # the app answers once all eight are in
        except BaseException as exc:  # reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=one) for _ in range(CONCURRENT)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(WAIT)
    assert failures == [] and len(answers) == CONCURRENT
    assert len({port_of(answer) for answer in answers}) == CONCURRENT  # no two requests on one connection
    assert pool.idle_count(key) == pool.per_key  # the rest were closed, not kept
    dials = len(setting.agent.dials)
    for _ in range(pool.per_key):
        setting.request(pool, key, "/")
    assert len(setting.agent.dials) == dials


def test_a_connection_the_app_closes_is_not_kept(setting: Setting, pool: ConnectionPool) -> None:
    key = setting.key()
    closed = setting.request(pool, key, "/close")
    assert pool.idle_count(key) == 0
    assert port_of(setting.request(pool, key, "/")) != port_of(closed)
    assert len(setting.agent.dials) == 2


def test_an_idle_connection_the_app_closed_is_let_go_and_the_request_succeeds(
    setting: Setting, pool: ConnectionPool
) -> None:
    key = setting.key()
    first = setting.request(pool, key, "/")
    setting.app.close_idle_connections()  # as an app's keep-alive timeout does
    # Whether its end of file has come through the tunnel yet or not, the request gets an answer.
    assert port_of(setting.request(pool, key, "/again")) != port_of(first)
    # Once it has come, the connection is not even tried.
    [kept] = pool._idle[key]
    setting.app.close_idle_connections()
    assert kept.http.sock is not None and select.select([kept.http.sock], [], [], WAIT)[0]
    assert pool.take(key) is None
    assert kept.tunnel.ended.wait(WAIT)  # let go of, tunnel and all


@pytest.mark.parametrize("body", [b"", b"x" * 100], ids=["get", "small-post"])
def test_a_request_the_app_drops_on_a_kept_connection_is_sent_again_on_a_new_one(
    setting: Setting, pool: ConnectionPool, body: bytes
) -> None:
    key = setting.key()
    setting.request(pool, key, "/")
    setting.app.state.drop_next_reused = True
    answer = setting.request(pool, key, "/retried", body)
    assert answer.split()[2:] == ["/retried", str(len(body))]
    assert len(setting.agent.dials) == 2


def restarting_replica_ends(setting: Setting) -> Callable[[], None]:
    """What a draining replica holding the agent's half of the request's tunnel does: it ends it with 4503 before
    the app's answer has come through."""

    def end() -> None:
        setting.agent.halves[-1].push(tunnels.CLOSE + tunnels.close_item(CLOSE_SERVER_RESTARTING, "restarting"))

    return end


@pytest.mark.parametrize("reused", [False, True], ids=["new-connection", "kept-connection"])
def test_a_get_whose_tunnel_a_restarting_replica_ended_is_sent_again_on_a_new_tunnel(
    setting: Setting, pool: ConnectionPool, reused: bool
) -> None:
    key = setting.key()
    if reused:
        setting.request(pool, key, "/")
    dials_before = len(setting.agent.dials)
    setting.app.state.end_next_tunnel = restarting_replica_ends(setting)
    answer = setting.request(pool, key, "/during-a-roll")
    assert answer.split()[1:3] == ["GET", "/during-a-roll"]
    # A kept connection is given up for a new one at once, as when the app closed it; a new one is dialled again.
    assert len(setting.agent.dials) == dials_before + (1 if reused else 2)


def test_a_post_whose_tunnel_a_restarting_replica_ended_is_not_sent_again(
    setting: Setting, pool: ConnectionPool
) -> None:
    # The app may have acted on it: the person is told, as nginx would not pass it to another server either.
    setting.app.state.end_next_tunnel = restarting_replica_ends(setting)
    with pytest.raises(AppUnavailable, match="did not answer"):
        setting.request(pool, setting.key(), "/posted", b"x" * 100)
    assert len(setting.agent.dials) == 1


def test_a_large_body_goes_on_a_new_connection(setting: Setting, pool: ConnectionPool) -> None:
    """A streamed body could not be sent twice: it never risks a connection the app may have closed."""
    key = setting.key()
    setting.request(pool, key, "/")
    body = b"y" * (REPLAYABLE_BODY_BYTES + 1)
    assert setting.request(pool, key, "/upload", body).split()[3] == str(len(body))
    assert len(setting.agent.dials) == 2
    assert pool.idle_count(key) == 2  # both kept: each answer was read to the end


def test_a_tunnel_closed_for_lost_access_leaves_the_pool(setting: Setting, pool: ConnectionPool) -> None:
    holder = Holder("alice-id", str(uuid.uuid4()))
    key = setting.key("alice-id", holder)
    setting.request(pool, key, "/")
    # While idle it is listed under its holder, where close_lost (app/agents/connections.py) looks.
    [tunnel_id] = tunnels.open_tunnels(setting.client, holder.workspace_id)
    assert tunnel_id == setting.agent.dials[0]
    [kept] = pool._idle[key]
    tunnels.close_tunnel(setting.client, tunnel_id, holder.workspace_id, CLOSE_ACCESS_REVOKED, "access removed")
    assert kept.tunnel.ended.wait(WAIT)
    assert pool.idle_count() == 0
    setting.request(pool, key, "/")  # the next request (allowed again by the view) dials afresh
    assert len(setting.agent.dials) == 2


def test_the_agent_going_away_empties_its_part_of_the_pool(setting: Setting, pool: ConnectionPool) -> None:
    setting.request(pool, setting.key("alice"), "/")
    setting.request(pool, setting.key("carol"), "/")
    kept = [connection for stack in pool._idle.values() for connection in stack]
    setting.agent.go_away()
    assert all(connection.tunnel.ended.wait(WAIT) for connection in kept)
    assert pool.idle_count() == 0


def test_idle_connections_are_closed_after_the_idle_time(setting: Setting) -> None:
    pool = ConnectionPool(idle_seconds=0.2, sweep_every=0.05)
    try:
        setting.request(pool, setting.key(), "/")
        [kept] = pool._idle[setting.key()]
        assert kept.tunnel.ended.wait(WAIT)  # the sweeper closed it, and with it its tunnel
        assert pool.idle_count() == 0
    finally:
        pool.close()


def test_the_pool_keeps_at_most_its_total_closing_the_longest_idle(setting: Setting) -> None:
    pool = ConnectionPool(per_key=6, total=2)
    try:
        keys = [setting.key(viewer) for viewer in ("alice", "carol", "dave")]
        for key in keys:
            setting.request(pool, key, "/")
        assert pool.idle_count() == 2
        assert [pool.idle_count(key) for key in keys] == [0, 1, 1]
    finally:
        pool.close()
