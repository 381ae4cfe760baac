"""A replica that drains (SIGTERM in a rolling restart) ends the tunnels it relays with 4503 "server restarting" on
both sides, at once, rather than leaving them to be cut when it stops; and `slipway ssh`, in both its modes, says
why the tunnel ended and that connecting again works, instead of a bare exit 255."""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import threading
import uuid
from collections.abc import Iterator

import pytest
import redis

from app.agents.tunnels import CLOSE, DATA, TunnelHalf, parse_close, relay
from app.core.websocket import WebSocketClosed
from cli.ssh import _relay_stdio
from cli.tunnel import FileDescriptorEnd, TunnelError
from protocol.agentapi import CLOSE_SERVER_RESTARTING, SERVER_RESTARTING_REASON
from tests.support.tunnel_servers import Endpoint, close_as_draining, ending_server

WAIT = 30.0  # generous: the machine is shared


class QueueEndpoint:
    """The user's end of a tunnel as the relay sees a WebSocket: frames in from a queue, frames out to a list, and
    the close it was given."""

    def __init__(self) -> None:
        self.incoming: queue.Queue[bytes | str] = queue.Queue()
        self.sent: list[bytes | str] = []
        self.closes: list[tuple[int, str]] = []

    def receive(self, timeout: float | None = None) -> bytes | str | None:
        if self.closes:
            raise WebSocketClosed(*self.closes[0])
        try:
            return self.incoming.get(timeout=timeout) if timeout else self.incoming.get_nowait()
        except queue.Empty:
            return None

    def send(self, data: bytes | str) -> None:
        self.sent.append(data)

    def close(self, code: int = 1000, reason: str = "") -> None:
        self.closes.append((code, reason))


@pytest.fixture
def client(redis_server: str) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(redis_server) as connection:
        yield connection


def test_a_draining_replica_ends_its_tunnels_on_both_sides_with_server_restarting(client: redis.Redis) -> None:
    tunnel_id = str(uuid.uuid4())
    user, agent = TunnelHalf(client, tunnel_id, "user"), TunnelHalf(client, tunnel_id, "agent")
    user.beat()
    agent.beat()
    endpoint = QueueEndpoint()
    draining = threading.Event()
    ended: list[object] = []
    relaying = threading.Thread(target=lambda: ended.append(relay(endpoint, user, draining.is_set)), daemon=True)
    relaying.start()

    # Before the drain the tunnel carries bytes both ways.
    endpoint.incoming.put(b"ping")
    item = agent.pop(timeout=WAIT)
    assert item is not None and (item.kind, item.payload) == (DATA, b"ping")
    agent.push(DATA + b"pong")
    first = agent.pop(timeout=0.1)  # nothing else came from the user's side meanwhile
    assert first is None
    draining.set()
    relaying.join(timeout=WAIT)
    assert not relaying.is_alive(), "the relay went on after its replica began draining"

    # The user's end hears why, first, with the code a client reconnects on; the agent's half hears the same.
    assert endpoint.closes[0] == (CLOSE_SERVER_RESTARTING, SERVER_RESTARTING_REASON)
    heard = agent.pop(timeout=WAIT)
    assert heard is not None and heard.kind == CLOSE
    assert parse_close(heard.payload) == (CLOSE_SERVER_RESTARTING, SERVER_RESTARTING_REASON)
    # The connection log records the end as the server's, not as a silence (a "timed out" row).
    assert [(end.peer_code, end.broken, end.by_endpoint) for end in ended] == [  # type: ignore[attr-defined]
        (CLOSE_SERVER_RESTARTING, False, False)
    ]


def test_a_relay_not_draining_keeps_its_tunnel_open(client: redis.Redis) -> None:
    tunnel_id = str(uuid.uuid4())
    user, agent = TunnelHalf(client, tunnel_id, "user"), TunnelHalf(client, tunnel_id, "agent")
    user.beat()
    agent.beat()
    endpoint = QueueEndpoint()
    relaying = threading.Thread(target=relay, args=(endpoint, user, lambda: False), daemon=True)
    relaying.start()
    agent.push(DATA + b"hello")
    deadline = threading.Event()
    for _ in range(int(WAIT * 10)):
        if endpoint.sent:
            break
        deadline.wait(0.1)
    assert endpoint.sent == [b"hello"] and endpoint.closes == []
    agent.push(CLOSE + b"\x03\xe8")  # the agent closes normally: the relay ends with it
    relaying.join(timeout=WAIT)
    assert not relaying.is_alive()
    assert endpoint.closes[0][0] == 1000


# `slipway ssh`'s own session on a draining replica: tests/test_cli_ssh_tunnel_loss.py, with the server that died.
def test_the_proxy_command_relay_says_why_its_tunnel_ended() -> None:
    """OpenSSH shows its ProxyCommand's stderr: the reason reaches the person even though ssh itself exits 255."""

    async def scenario() -> None:
        stdin_read, stdin_write = os.pipe()
        stdout_read, stdout_write = os.pipe()
        local = FileDescriptorEnd(stdin_read, stdout_write)
        try:
            async with ending_server(close_as_draining) as url:
                with pytest.raises(TunnelError, match="replica holding it is restarting"):
                    await asyncio.wait_for(_relay_stdio(Endpoint(url), local), timeout=WAIT)  # type: ignore[arg-type]
        finally:
            local.close()
            for fd in (stdin_write, stdout_read, stdout_write):
                with contextlib.suppress(OSError):
                    os.close(fd)

    # The relay takes SIGHUP and SIGTERM as OpenSSH's end of the session; the loop's close resets them to the
    # default, and this worker's own SIGTERM handler (tests/conftest.py) must survive.
    kept = {signum: signal.getsignal(signum) for signum in (signal.SIGHUP, signal.SIGTERM)}
    try:
        asyncio.run(scenario())
    finally:
        for signum, handler in kept.items():
            signal.signal(signum, handler)
