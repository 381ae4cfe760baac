"""The reverse proxy behind path-based apps: HTTP and WebSocket requests carried through a tunnel to the agent.

The tunnel ends in one side of a socket pair (a :class:`SocketEndpoint` relayed in the background), so the
request is spoken over the other side by ``http.client`` as if the app were local. WebSocket upgrades are
spliced byte for byte between the browser's socket and the tunnel once the app agrees to switch protocols.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import threading
from collections.abc import Iterator

import redis
from flask import Request, Response, stream_with_context

from app.agents import tunnels
from app.agents.apps import AppTarget
from app.security_headers import ForeignResponse
from app.websocket import TakenOverResponse

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length",
}  # fmt: skip
# The dashboard's own credentials never reach an app.
SESSION_COOKIES = ("slipway_session", "session", "remember_token")
CHUNK = 64 * 1024
SANDBOX = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"


class AppUnavailable(Exception):
    """The app could not be reached; the message says why, for the 502 page."""


class TunnelConnection:
    """A socket to the app: one end of a socket pair whose other end is relayed through a tunnel."""

    def __init__(self, client: redis.Redis, agent_id: str, target: AppTarget) -> None:
        half = tunnels.dial(client, agent_id, {"service": "tcp", "host": target.host, "port": target.port})
        failure = tunnels.wait_open(half)
        if failure is not None:
            raise AppUnavailable(failure[1])
        ours, theirs = socket.socketpair()
        self.socket: socket.socket = ours
        self._relay = threading.Thread(
            target=tunnels.relay, args=(tunnels.SocketEndpoint(theirs), half), name="app-proxy", daemon=True
        )
        self._relay.start()
        self._theirs = theirs
        if target.scheme == "https":
            # The app is reached inside the workspace (often with a self-signed certificate): the tunnel, not
            # TLS, is what authenticates it.
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            self.socket = context.wrap_socket(ours, server_hostname=target.host)

    def close(self) -> None:
        for sock in (self.socket, self._theirs):
            try:
                sock.close()
            except OSError:
                pass


def upstream_headers(request: Request, target: AppTarget, *, websocket: bool) -> dict[str, str]:
    headers = {
        name: value
        for name, value in request.headers.items()
        if name.lower() not in HOP_BY_HOP and name.lower() != "authorization"
    }
    cookies = [
        part.strip()
        for part in request.headers.get("Cookie", "").split(";")
        if part.strip() and part.strip().split("=", 1)[0] not in SESSION_COOKIES
    ]
    headers.pop("Cookie", None)
    if cookies:
        headers["Cookie"] = "; ".join(cookies)
    default_port = 443 if target.scheme == "https" else 80
    headers["Host"] = target.host if target.port == default_port else f"{target.host}:{target.port}"
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Proto"] = request.scheme
    headers["X-Forwarded-For"] = request.remote_addr or ""
    if websocket:
        headers["Connection"] = "Upgrade"
        headers["Upgrade"] = "websocket"
    return headers


def upstream_path(target: AppTarget, rest: str, query: bytes) -> str:
    path = f"{target.base_path}/{rest}"
    return f"{path}?{query.decode('latin-1')}" if query else path


def proxy_http(
    client: redis.Redis, target: AppTarget, request: Request, rest: str, *, prefix: str, sandbox: bool
) -> Response:
    connection = TunnelConnection(client, target.agent.id, target)
    conn = http.client.HTTPConnection(target.host, target.port, timeout=300)
    conn.sock = connection.socket
    headers = upstream_headers(request, target, websocket=False)
    body: object = None
    chunked = False
    if request.content_length:  # streamed to the app as it arrives, never held whole in memory
        body, headers["Content-Length"] = request.stream, str(request.content_length)
    elif request.headers.get("Transfer-Encoding", "").lower() == "chunked":
        body, chunked = iter(lambda: request.stream.read(CHUNK), b""), True
    try:
        conn.request(
            request.method,
            upstream_path(target, rest, request.query_string),
            body=body,  # type: ignore[arg-type]  # a stream or an iterable of bytes, both accepted
            headers=headers,
            encode_chunked=chunked,
        )
        upstream = conn.getresponse()
    except (OSError, http.client.HTTPException) as exc:
        connection.close()
        raise AppUnavailable(f"the app did not answer ({exc or exc.__class__.__name__})") from exc

    def body_chunks() -> Iterator[bytes]:
        try:
            while chunk := upstream.read1(CHUNK):
                yield chunk
        except (OSError, http.client.HTTPException):
            return  # the app or the tunnel went away mid-body: end the response where it broke
        finally:
            conn.close()
            connection.close()

    answer = _response_headers(upstream.getheaders(), target, prefix, sandbox)
    # The app's own headers, not the dashboard's: its pages would break under the dashboard's policy.
    return ForeignResponse(stream_with_context(body_chunks()), status=upstream.status, headers=answer)


def _response_headers(
    items: list[tuple[str, str]], target: AppTarget, prefix: str, sandbox: bool
) -> list[tuple[str, str]]:
    headers = []
    app_origins = {f"{target.scheme}://{target.host}:{target.port}", f"{target.scheme}://{target.host}"}
    for name, value in items:
        lowered = name.lower()
        if lowered in HOP_BY_HOP - {"content-length"}:
            continue
        if lowered == "location":
            value = _rewrite_location(value, app_origins, target.base_path, prefix)
        headers.append((name, value))
    if sandbox:
        headers.append(("Content-Security-Policy", SANDBOX))
    return headers


def _rewrite_location(location: str, app_origins: set[str], base_path: str, prefix: str) -> str:
    """Redirects the app makes to itself (absolute, or root-relative under its base) stay inside the proxy."""
    for origin in app_origins:
        if location.startswith(origin):
            location = location[len(origin) :] or "/"
            break
    else:
        if not location.startswith("/"):
            return location
    if base_path and location.startswith(base_path):
        location = location[len(base_path) :] or "/"
    return prefix.rstrip("/") + location


def proxy_websocket(client: redis.Redis, target: AppTarget, request: Request, rest: str) -> Response:
    """Forward the upgrade; once the app answers 101, splice the browser's socket and the tunnel."""
    browser: socket.socket | None = request.environ.get("gunicorn.socket")
    if browser is None:
        raise AppUnavailable("WebSocket apps need the slipway server (gunicorn)")
    connection = TunnelConnection(client, target.agent.id, target)
    headers = upstream_headers(request, target, websocket=True)
    head = f"GET {upstream_path(target, rest, request.query_string)} HTTP/1.1\r\n"
    head += "".join(f"{name}: {value}\r\n" for name, value in headers.items()) + "\r\n"
    try:
        connection.socket.sendall(head.encode("latin-1"))
        status_line, response_head, early = _read_head(connection.socket)
    except (OSError, ValueError) as exc:
        connection.close()
        raise AppUnavailable(f"the app did not answer the WebSocket upgrade ({exc})") from exc
    if " 101 " not in status_line + " ":
        connection.close()
        raise AppUnavailable(f"the app refused the WebSocket upgrade ({status_line.strip()})")
    browser.sendall(response_head + early)
    _splice(browser, connection.socket)
    connection.close()
    return TakenOverResponse()


def _read_head(sock: socket.socket) -> tuple[str, bytes, bytes]:
    """The response's status line, its whole head (to pass on as is), and any bytes read past it."""
    buffer = b""
    while b"\r\n\r\n" not in buffer:
        data = sock.recv(CHUNK)
        if not data:
            raise ValueError("the connection closed before the response headers ended")
        buffer += data
        if len(buffer) > 64 * 1024:
            raise ValueError("response headers too large")
    head, _, early = buffer.partition(b"\r\n\r\n")
    return head.split(b"\r\n", 1)[0].decode("latin-1"), head + b"\r\n\r\n", early


def _splice(a: socket.socket, b: socket.socket) -> None:
    def pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(CHUNK):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for sock in (source, sink):
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    other = threading.Thread(target=pump, args=(b, a), daemon=True)
    other.start()
    pump(a, b)
    other.join()
