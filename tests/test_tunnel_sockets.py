"""The app proxy's end of a tunnel (a socket pair relayed through real Redis): letting go of it while the relay is
reading must end the relay quietly. Closing it under the relay's reader made the reader's next select fail on fd -1
(`ValueError: file descriptor cannot be a negative integer (-1)` in the server log, issue 35)."""

from __future__ import annotations

import socket
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from app.agents.tunnels import CLOSE, DATA, TEXT, SocketEndpoint, TunnelHalf, relay


@pytest.fixture
def client(redis_server: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_server) as connection:
        yield connection


@pytest.fixture
def thread_errors() -> Iterator[list[BaseException | None]]:
    """Exceptions that escape any thread during the test (the reader's ValueError was one)."""
    errors: list[BaseException | None] = []
    previous = threading.excepthook
    threading.excepthook = lambda failure: errors.append(failure.exc_value)
    yield errors
    threading.excepthook = previous


def test_letting_go_of_the_proxy_s_end_mid_receive_ends_the_relay_without_an_error(
    client: redis.Redis, thread_errors: list[BaseException | None]
) -> None:
    tunnel_id = str(uuid.uuid4())
    user, agent = TunnelHalf(client, tunnel_id, "user"), TunnelHalf(client, tunnel_id, "agent")
    user.beat()
    agent.beat()
    ours, theirs = socket.socketpair()
    endpoint = SocketEndpoint(theirs)
    relaying = threading.Thread(target=relay, args=(endpoint, user), daemon=True)
    relaying.start()

    ours.sendall(b"GET / HTTP/1.1\r\n\r\n")
    item = agent.pop(timeout=1)
    assert item is not None and (item.kind, item.payload) == (DATA, b"GET / HTTP/1.1\r\n\r\n")
    # The reader is back waiting on the socket; the proxy is done with the app (TunnelConnection.close).
    ours.close()
    endpoint.release()
    relaying.join(timeout=10)
    assert not relaying.is_alive(), "the relay kept running after its socket was let go"
    assert theirs.fileno() == -1, "the relay's socket was left open"
    assert thread_errors == []
    # The agent's half hears that this side is done (its EOF, or the close of the tunnel), not silence.
    heard = [agent.pop(timeout=1) for _ in range(2)]
    assert any(item is not None and item.kind in (TEXT, CLOSE) for item in heard), heard


class _RedisGoneHalf(TunnelHalf):
    """A half whose Redis went away under its relay, as redis-py reports it: the pop fails (the server closed the
    connection), and the clean-up then finds the client closed by its owner (the app torn down)."""

    def pop(self, timeout: float) -> None:
        raise redis.ConnectionError("Connection closed by server.")

    def cleanup(self) -> None:
        raise ValueError("I/O operation on closed file.")


def test_a_relay_whose_redis_went_away_ends_as_broken_without_an_error(
    client: redis.Redis, thread_errors: list[BaseException | None]
) -> None:
    """An idle pooled app connection's relay outlives the Redis it reads from: its end crashed the thread (CI, as a
    test of another module started)."""
    half = _RedisGoneHalf(client, str(uuid.uuid4()), "user")
    ours, theirs = socket.socketpair()
    endpoint = SocketEndpoint(theirs)
    try:
        assert relay(endpoint, half).broken
    finally:
        ours.close()
        endpoint.release()
    assert thread_errors == []
