"""The web server's gunicorn worker: gunicorn's gevent worker, guarded against half-sent requests ("slowloris").

gunicorn gives a request head as long as the keep-alive timeout to arrive, however slowly it trickles in, and
lets one address hold every connection slot of a worker: a few thousand sockets that send half a request line
stopped the server. This worker

- gives the first request on a connection ``request_header_timeout`` to arrive whole (line and headers). A kept-
  alive connection may then stay idle as long as keep-alive allows; once the next request starts arriving, its
  head too has ``request_header_timeout``. A head that stalls gets 408 and the connection is closed;
- refuses an address (an IPv6 /64) more than ``max_connections_per_client`` open connections in this worker:
  429, and the connection is closed at once. Trusted proxies (gunicorn's ``forwarded_allow_ips``, by default
  the loopback addresses) are not limited: their connections carry many clients, and a proxy limits its own;
- closes a connection after the response when the application asks (``CLOSE_CONNECTION_ENVIRON``): a client
  refused a live stream keeps no slot idling in keep-alive.

Request bodies are not timed here: Slipway's bodies are small and read at once; a proxy in front covers the rest.
"""

from __future__ import annotations

import gc
import ipaddress
import json
import logging
from collections import Counter
from collections.abc import Callable, Iterable
from types import TracebackType
from typing import Any

import gevent
from gevent import socket as gsocket
from gunicorn.workers.ggevent import GeventWorker

log = logging.getLogger("slipway.server")

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def _response(status: str, message: str) -> bytes:
    body = json.dumps({"message": message}).encode() + b"\n"
    head = (
        f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    )
    return head.encode() + body


REQUEST_TIMEOUT_RESPONSE = _response("408 Request Timeout", "The request's headers took too long to arrive.")
TOO_MANY_CONNECTIONS_RESPONSE = _response(
    "429 Too Many Requests", "Too many connections from your address; close some and try again."
)
# Writing a refusal must never hold the greenlet: the client may not be reading.
REFUSAL_WRITE_SECONDS = 1.0


class HeadDeadline:
    """The time one request head may take; entered around gunicorn's read of the next request.

    ``idle`` runs from the start; with ``restart_on_first_byte``, the first bytes of the head replace it with
    ``head`` (keep-alive: waiting for a next request is not slow sending). Expiry is swallowed here, so gunicorn
    sees no request and closes the connection; a partly received head is answered 408 first."""

    def __init__(self, sock: GuardedSocket, idle: float, head: float, *, restart_on_first_byte: bool) -> None:
        self.sock = sock
        self.idle = idle
        self.head = head
        self.restart_on_first_byte = restart_on_first_byte
        self.started = False
        self.timer = gevent.Timeout(idle)

    def __enter__(self) -> HeadDeadline:
        self.sock.head_deadline = self
        self.timer.start()
        return self

    def first_bytes(self) -> None:
        if self.started:
            return
        self.started = True
        if self.restart_on_first_byte:
            self.timer.close()
            self.timer = gevent.Timeout(self.head)
            self.timer.start()

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> bool:
        self.sock.head_deadline = None
        self.timer.close()
        if error is None or error is not self.timer:
            return False
        if self.started:
            _send_and_close(self.sock, REQUEST_TIMEOUT_RESPONSE)
        return True


class GuardedSocket(gsocket.socket):  # type: ignore[misc]  # gevent is untyped
    """The client's socket, telling the request head's deadline when the head's first bytes arrive."""

    head_deadline: HeadDeadline | None = None
    requests_begun = 0
    current_request: Any = None

    def recv(self, *args: Any) -> bytes:
        data: bytes = super().recv(*args)
        deadline = self.head_deadline
        if data and deadline is not None:
            deadline.first_bytes()
        return data


def _send_and_close(sock: gsocket.socket, response: bytes) -> None:
    with gevent.Timeout(REFUSAL_WRITE_SECONDS, False):
        try:
            sock.sendall(response)
            sock.shutdown(gsocket.SHUT_WR)
            # Take what the client already sent, without waiting for more: closing with unread bytes would
            # reset the connection, and the client could lose the answer before reading it.
            sock.setblocking(False)
            for _ in range(16):
                if not sock.recv(65536):
                    break
        except OSError:  # nothing more to read now (EAGAIN), or the client is gone
            pass
    try:
        sock.close()
    except OSError:
        pass


def peer_address(addr: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The client's IP address, or None for a unix socket peer (a local proxy) or an unparsable one."""
    if not isinstance(addr, tuple) or not addr:
        return None
    try:
        return ipaddress.ip_address(str(addr[0]).split("%", 1)[0])
    except ValueError:
        return None


def client_key(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> str:
    """Whose connection this is for the per-client limit: the IPv4 address, or the IPv6 /64 (one host's share)."""
    if isinstance(address, ipaddress.IPv6Address):
        if address.ipv4_mapped is not None:
            return str(address.ipv4_mapped)
        return str(ipaddress.ip_network(f"{address}/64", strict=False))
    return str(address)


class GuardedGeventWorker(GeventWorker):  # type: ignore[misc]  # gunicorn is untyped
    """The application is loaded in gunicorn's master and forked into the workers (app/server/web.py); the
    settings this class reads are read in the worker, after the fork."""

    header_timeout = 10.0
    per_client = 0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.open_by_client: Counter[str] = Counter()
        self.refusing: set[str] = set()
        self.sockets_by_greenlet: dict[Any, GuardedSocket] = {}
        allowed = self.cfg.forwarded_allow_ips
        self.trust_every_peer = "*" in allowed
        self.trusted_networks = []
        for entry in allowed:
            try:
                self.trusted_networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                continue  # a host name: gunicorn matches those itself, we cannot here

    def load_wsgi(self) -> None:
        from app.core.config import load_settings

        settings = load_settings()
        self.header_timeout = float(settings.request_header_timeout)
        self.per_client = settings.max_connections_per_client
        super().load_wsgi()
        # What is loaded by now (modules, the app, SQLAlchemy's mappers: ~180,000 objects) lives as long as the
        # worker. Frozen, it is out of the cycle collector's sight: a full collection otherwise walks all of it in
        # the middle of whichever request triggers it (~100-170 ms, every few lists of a few hundred rows: their
        # p99), and frozen it walks only what requests made. The master froze the application before the fork
        # (app/server/web.py); this freezes what the worker made since.
        gc.collect()
        gc.freeze()
        loaded: WSGIApp = getattr(self, "wsgi")  # noqa: B009 - set by gunicorn, untyped
        self.wsgi = self._closing_when_asked(loaded)

    @staticmethod
    def _closing_when_asked(app: WSGIApp) -> WSGIApp:
        from app.core.limits import CLOSE_CONNECTION_ENVIRON

        def application(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
            def start(status: str, headers: list[tuple[str, str]], exc_info: Any = None) -> Any:
                if environ.get(CLOSE_CONNECTION_ENVIRON):
                    request = getattr(environ.get("gunicorn.socket"), "current_request", None)
                    if request is not None:
                        request.must_close = True  # gunicorn then answers "Connection: close" and closes
                return start_response(status, headers, exc_info)

            return app(environ, start)

        return application

    def _limited_key(self, addr: Any) -> str | None:
        """The per-client key of a peer the limit applies to; None when it does not (off, or a trusted proxy)."""
        address = peer_address(addr)
        if self.per_client == 0 or self.trust_every_peer or address is None:
            return None
        if any(address in network for network in self.trusted_networks if network.version == address.version):
            return None
        return client_key(address)

    def handle(self, listener: Any, client: Any, addr: Any) -> None:
        key = self._limited_key(addr)
        if key is not None and self.open_by_client[key] >= self.per_client:
            if key not in self.refusing:  # one line while an address stays over the limit
                self.refusing.add(key)
                log.warning("refusing connections from %s: it holds %d in this worker already", key, self.per_client)
            _send_and_close(client, TOO_MANY_CONNECTIONS_RESPONSE)
            return
        sock = GuardedSocket(client.family, client.type, client.proto, fileno=client.detach())
        greenlet = gevent.getcurrent()
        self.sockets_by_greenlet[greenlet] = sock
        if key is not None:
            self.open_by_client[key] += 1
        try:
            super().handle(listener, sock, addr)
        finally:
            self.sockets_by_greenlet.pop(greenlet, None)
            if key is not None:
                self.open_by_client[key] -= 1
                if self.open_by_client[key] <= 0:
                    del self.open_by_client[key]
                if self.open_by_client[key] < self.per_client:
                    self.refusing.discard(key)

    def handle_request(self, listener_name: Any, req: Any, sock: Any, addr: Any) -> bool:
        sock.current_request = req
        try:
            return bool(super().handle_request(listener_name, req, sock, addr))
        finally:
            sock.current_request = None

    def timeout_ctx(self) -> Any:
        sock = self.sockets_by_greenlet.get(gevent.getcurrent())
        if sock is None:  # not a connection of ours (cannot happen); gunicorn's own rule
            return super().timeout_ctx()
        sock.requests_begun += 1
        if sock.requests_begun == 1:
            return HeadDeadline(sock, self.header_timeout, self.header_timeout, restart_on_first_byte=False)
        idle = max(float(self.cfg.keepalive), self.header_timeout)
        return HeadDeadline(sock, idle, self.header_timeout, restart_on_first_byte=True)
