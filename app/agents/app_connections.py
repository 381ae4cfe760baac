"""Connections to apps, kept open between requests: a pool of idle keep-alive connections per replica.

Opening a tunnel is the slow part of an app request: the dial goes through Redis to whichever replica holds the
agent's control connection, the agent opens a new WebSocket back (its handshake, its token checked) and connects
to the app — tens of milliseconds, on every request (issue 35's benchmark). As browsers and Coder's proxy (Go's
``http.Transport``) do, a connection whose response was read to the end and which the app keeps alive goes back
to a pool, and the next request to the same app port takes it.

What keeps that safe:

- **Keyed by who.** A pooled connection belongs to one agent's port *and* one viewer (and the holder whose access
  decides whether its tunnel may stay open, app/agents/connections.py): one person's request never travels on a
  connection opened for another. Authorisation stays per request: the view decides before a connection is taken.
- **Only whole, open connections.** A connection goes back only after its response was read to the end and the
  app did not ask to close it; it is taken again only if nothing arrived on it meanwhile (the app's close, or the
  tunnel's, arrives as end of file on our socket).
- **Closed with its tunnel.** When a tunnel ends (the agent went away, or ``close_lost`` closed it because its
  holder lost access, on any replica: its close frame travels through Redis), its relay ends and the connection
  leaves the pool at once.
- **Bounded.** At most :data:`MAX_IDLE_PER_KEY` idle connections per key (a browser opens six per host) and
  :data:`MAX_IDLE` per process; each is closed after :data:`IDLE_SECONDS` unused.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import redis
from flask import Flask, current_app

from app.agents import tunnels
from app.agents.apps import AppTarget
from app.agents.tunnels import DialRequest, Holder
from app.core.signing import Signer
from protocol.agentapi import CLOSE_SERVER_RESTARTING

EXTENSION_KEY = "slipway_app_connections"
MAX_IDLE_PER_KEY = 6
MAX_IDLE = 48
# Shorter than most apps' own keep-alive timeouts would be safer but would cost a dial after each pause; an app
# that closes first is noticed when the connection is next taken (its end of file has arrived by then).
IDLE_SECONDS = 30.0
SWEEP_EVERY_SECONDS = 5.0
# Nothing bounds how long an app may take to answer (long polls, slow builds); the tunnel's own liveness checks
# end a connection whose agent went away.
READ_TIMEOUT_SECONDS: float | None = None


class AppUnavailable(Exception):
    """The app could not be reached; the message says why, for the 502 page."""


@dataclass(frozen=True)
class PoolKey:
    """Which idle connections a request may take: the same app address on the same agent, for the same person."""

    agent_id: str
    scheme: str
    host: str
    port: int
    viewer_id: str  # "" for a signed-out visitor of a public app
    holder: Holder | None

    @classmethod
    def of(cls, target: AppTarget, viewer_id: str, holder: Holder | None) -> PoolKey:
        return cls(target.agent.id, target.scheme, target.host, target.port, viewer_id, holder)


class TunnelConnection:
    """A socket to the app: one end of a socket pair whose other end is relayed through a tunnel. ``on_end`` runs
    once the relay has ended (the tunnel closed from either side)."""

    def __init__(
        self,
        client: redis.Redis,
        signer: Signer,
        agent_id: str,
        target: AppTarget,
        holder: Holder | None,
        on_end: Callable[[], None] | None = None,
        dial_timeout: float = tunnels.DIAL_TIMEOUT_SECONDS,
    ) -> None:
        wanted = DialRequest(service="tcp", host=target.host, port=target.port)
        half = tunnels.dial(client, signer, agent_id, wanted, holder)
        failure = tunnels.wait_open(half, dial_timeout)
        if failure is not None:
            raise AppUnavailable(failure[1])
        ours, theirs = socket.socketpair()
        self.socket: socket.socket = ours
        self.tunnel_id = half.tunnel_id
        self.ended = threading.Event()
        self.end = tunnels.TunnelEnd()
        self._endpoint = tunnels.SocketEndpoint(theirs)
        self._relay = threading.Thread(target=self._run_relay, args=(half, on_end), name="app-proxy", daemon=True)
        self._relay.start()
        if target.scheme == "https":
            # The app is reached inside the workspace (often with a self-signed certificate): the tunnel, not
            # TLS, is what authenticates it.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            self.socket = context.wrap_socket(ours, server_hostname=target.host)

    def _run_relay(self, half: tunnels.TunnelHalf, on_end: Callable[[], None] | None) -> None:
        try:
            tunnels.relay(self._endpoint, half, end=self.end)
        finally:
            self.ended.set()
            if on_end is not None:
                on_end()

    def close(self) -> None:
        try:
            self.socket.close()
        except OSError:
            pass
        # The relay's end is its socket: closed by the endpoint once its reader is not using it (a plain close here
        # raced the reader's next select on fd -1).
        self._endpoint.release()


class AppConnection:
    """An HTTP/1.1 connection to an app over a tunnel of its own, reusable while the app keeps it alive."""

    def __init__(self, key: PoolKey, tunnel: TunnelConnection) -> None:
        self.key = key
        self.tunnel = tunnel
        self.http = http.client.HTTPConnection(key.host, key.port, timeout=READ_TIMEOUT_SECONDS)
        self.http.sock = tunnel.socket
        # Never connect by itself: a connection the app closed must not be reopened from the web server's own
        # network (where the app's address means something else), only through a new tunnel.
        self.http.auto_open = 0
        self.uses = 0
        self.idle_since = 0.0

    @property
    def reused(self) -> bool:
        return self.uses > 1

    def reusable(self) -> bool:
        """The last response was read to the end and the app keeps the connection (http.client lets go of the socket
        when the response says it closes)."""
        return self.http.sock is not None and not self.tunnel.ended.is_set()

    def still_open(self) -> bool:
        """Nothing has arrived since the last response: an idle HTTP connection that became readable was closed by
        the app or by its tunnel (or the app sent bytes nobody asked for, equally unusable)."""
        sock = self.http.sock
        if sock is None or self.tunnel.ended.is_set():
            return False
        previous = sock.gettimeout()
        sock.settimeout(0.0)
        try:
            # TLS has no peek; a read that would block is the answer either way (a TLS 1.3 session ticket the app
            # sent after the handshake is consumed here, which is harmless).
            if isinstance(sock, ssl.SSLSocket):
                sock.recv(1)
            else:
                sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, ssl.SSLWantReadError):
            return True
        except OSError:
            return False
        finally:
            try:
                sock.settimeout(previous)
            except OSError:
                pass
        return False  # end of file, or bytes nobody asked for

    def ended_by_a_restart(self) -> bool:
        """Its tunnel was ended by a replica that is restarting (4503), not by the app or the agent."""
        return self.tunnel.end.peer_code == CLOSE_SERVER_RESTARTING

    def close(self) -> None:
        self.http.close()
        self.tunnel.close()


class ConnectionPool:
    """Idle app connections of one process (see the module's docstring for the rules)."""

    def __init__(
        self,
        *,
        per_key: int = MAX_IDLE_PER_KEY,
        total: int = MAX_IDLE,
        idle_seconds: float = IDLE_SECONDS,
        sweep_every: float = SWEEP_EVERY_SECONDS,
    ) -> None:
        self.per_key, self.total, self.idle_seconds, self.sweep_every = per_key, total, idle_seconds, sweep_every
        self._idle: dict[PoolKey, list[AppConnection]] = {}
        self._count = 0
        self._lock = threading.Lock()
        self._sweeper: threading.Thread | None = None
        self._closed = False

    def open(
        self,
        client: redis.Redis,
        signer: Signer,
        target: AppTarget,
        key: PoolKey,
        dial_timeout: float = tunnels.DIAL_TIMEOUT_SECONDS,
    ) -> AppConnection:
        """A new connection through a new tunnel (raises :class:`AppUnavailable`); it leaves the pool, if it is ever
        put there, as soon as its tunnel ends."""
        holder: list[AppConnection] = []
        tunnel = TunnelConnection(
            client, signer, key.agent_id, target, key.holder, lambda: self._ended(holder), dial_timeout
        )
        connection = AppConnection(key, tunnel)
        holder.append(connection)
        return connection

    def take(self, key: PoolKey) -> AppConnection | None:
        """The most recently used idle connection of ``key`` that is still open, or None."""
        while True:
            with self._lock:
                stack = self._idle.get(key)
                if not stack:
                    return None
                connection = stack.pop()
                self._forget_stack_if_empty(key)
                self._count -= 1
            if connection.still_open():  # outside the lock: a system call
                return connection
            connection.close()

    def give_back(self, connection: AppConnection) -> None:
        """Keep ``connection`` for the next request of its key, or close it (not reusable, pool full, shut)."""
        evicted: list[AppConnection] = []
        kept = False
        with self._lock:
            stack = self._idle.setdefault(connection.key, [])
            if not self._closed and connection.reusable() and len(stack) < self.per_key:
                while self._count >= self.total and self._evict_oldest(evicted):
                    pass
                connection.idle_since = time.monotonic()
                stack.append(connection)
                self._count += 1
                kept = True
                self._start_sweeper()
            self._forget_stack_if_empty(connection.key)
        for old in evicted if kept else [*evicted, connection]:
            old.close()

    def idle_count(self, key: PoolKey | None = None) -> int:
        with self._lock:
            return self._count if key is None else len(self._idle.get(key, ()))

    def close_where(self, matches: Callable[[PoolKey], bool]) -> int:
        """Close the idle connections whose key matches; how many."""
        with self._lock:
            closing = self._remove(key for key in list(self._idle) if matches(key))
        for connection in closing:
            connection.close()
        return len(closing)

    def sweep(self) -> int:
        """Close the connections idle for longer than ``idle_seconds``; how many."""
        expired_before = time.monotonic() - self.idle_seconds
        closing: list[AppConnection] = []
        with self._lock:
            for key, stack in list(self._idle.items()):
                old = [connection for connection in stack if connection.idle_since <= expired_before]
                if old:
                    stack[:] = [connection for connection in stack if connection.idle_since > expired_before]
                    self._count -= len(old)
                    closing += old
                    self._forget_stack_if_empty(key)
        for connection in closing:
            connection.close()
        return len(closing)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            closing = self._remove(list(self._idle))
        for connection in closing:
            connection.close()

    def _ended(self, holder: list[AppConnection]) -> None:
        """A connection's tunnel ended: out of the pool, if it is there."""
        if not holder:
            return
        connection = holder[0]
        with self._lock:
            stack = self._idle.get(connection.key, [])
            if connection not in stack:
                return
            stack.remove(connection)
            self._count -= 1
            self._forget_stack_if_empty(connection.key)
        connection.close()

    def _remove(self, keys: Iterable[PoolKey]) -> list[AppConnection]:
        removed: list[AppConnection] = []
        for key in keys:
            removed += self._idle.pop(key, [])
        self._count -= len(removed)
        return removed

    def _evict_oldest(self, evicted: list[AppConnection]) -> bool:
        stacks = [stack for stack in self._idle.values() if stack]
        if not stacks:
            return False
        oldest = min(stacks, key=lambda stack: stack[0].idle_since)
        evicted.append(oldest.pop(0))
        self._count -= 1
        self._forget_stack_if_empty(evicted[-1].key)
        return True

    def _forget_stack_if_empty(self, key: PoolKey) -> None:
        if not self._idle.get(key, True):
            del self._idle[key]

    def _start_sweeper(self) -> None:
        if self._sweeper is None or not self._sweeper.is_alive():
            self._sweeper = threading.Thread(target=self._sweep_while_any, name="app-pool-sweeper", daemon=True)
            self._sweeper.start()

    def _sweep_while_any(self) -> None:
        """Runs while anything is idle (a pool nobody uses keeps no thread)."""
        while True:
            time.sleep(self.sweep_every)
            self.sweep()
            with self._lock:
                if self._count == 0:
                    self._sweeper = None
                    return


def init_app(app: Flask) -> None:
    app.extensions[EXTENSION_KEY] = ConnectionPool()


def connection_pool() -> ConnectionPool:
    pool: ConnectionPool = current_app.extensions[EXTENSION_KEY]
    return pool
