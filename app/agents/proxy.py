"""The reverse proxy behind apps: HTTP and WebSocket requests carried through a tunnel to the agent.

The tunnel ends in one side of a socket pair (a :class:`SocketEndpoint` relayed in the background), so the
request is spoken over the other side by ``http.client`` as if the app were local; the connection is kept for the
next request (app/agents/app_connections.py). WebSocket upgrades are spliced byte for byte between the browser's
socket and the tunnel once the app agrees to switch protocols.
"""

from __future__ import annotations

import http.client
import re
import socket
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote_to_bytes

import redis
from flask import Request, Response, stream_with_context

from app.agents.app_connections import AppConnection, AppUnavailable, ConnectionPool, PoolKey, TunnelConnection
from app.agents.apps import AppTarget
from app.agents.tunnels import Holder
from app.core.security_headers import ForeignResponse
from app.core.signing import Signer
from app.core.websocket import TakenOverResponse

HOP_BY_HOP = {
    "connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer", "trailers",
    "transfer-encoding", "upgrade", "host", "content-length",
}  # fmt: skip
# The dashboard's own credentials never reach an app: every header Slipway takes a credential from
# (app/auth/access.py, app/agents/agent_api.py, app/provisioning/daemon_api.py), and every Slipway-* header,
# which covers the provisioner's (PSK, key) and any added later.
CREDENTIAL_HEADERS = frozenset(
    {"authorization", "proxy-authorization", "slipway-session-token", "coder-session-token", "slipway-agent-token"}
)
SLIPWAY_HEADER_PREFIX = "slipway-"
FORWARDING_HEADERS = frozenset({"forwarded", "x-real-ip"})
# RFC 6455 spells these with a capital S in WebSocket; the WSGI environ gives "Sec-Websocket-Key", and some apps
# read header names case-sensitively (Coder sends them as RFC 6455 spells them for the same reason).
_CANONICAL_CASE = {
    name.lower(): name
    for name in ("Sec-WebSocket-Key", "Sec-WebSocket-Version", "Sec-WebSocket-Protocol", "Sec-WebSocket-Extensions")
}
# Cookies Slipway sets or reads: the Flask session (SESSION_COOKIE_NAME, which also carries the CSRF token and
# the OIDC state; __Host- prefixed over HTTPS), Flask's default session name, Flask-Login's remember cookie and
# a subdomain app's sign-in (app/agents/app_tokens.py). An app neither sees nor sets them: a shared app that set
# its owner's session in a viewer's browser would sign the viewer in as its owner.
SLIPWAY_COOKIES = frozenset(
    {"slipway_session", "__host-slipway_session", "session", "remember_token", "slipway_app_session"}
)
# Response headers that act on the whole origin, which path apps share with the dashboard: wiping its storage
# and cookies (signing the viewer out), widening a service worker's scope to the dashboard's pages, or pinning
# its transport policy. The deployment decides these, never an app.
ORIGIN_WIDE_HEADERS = frozenset(
    {"clear-site-data", "service-worker-allowed", "strict-transport-security", "set-cookie2"}
)
CHUNK = 64 * 1024
# A request body up to this size is read before it is sent, so that it can be sent again (see _send); larger ones
# stream to the app as they arrive.
REPLAYABLE_BODY_BYTES = 64 * 1024
# Methods nginx also passes to the next server once sent (not POST, PATCH, LOCK: the app may have acted on them).
IDEMPOTENT_METHODS = frozenset({"GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"})
# A request whose tunnel a restarting replica ended is sent again within this long: the agent, moved to another
# replica, is back within about a second (bench/deploy.py); each dial it may have missed is given up sooner.
RESTART_RETRY_SECONDS = 10.0
RESTART_DIAL_TIMEOUT_SECONDS = 2.0
RESTART_RETRY_PAUSE_SECONDS = 0.2
# Every page an app serves runs in a sandbox, whoever opens it, the workspace's owner included: path apps share the
# dashboard's origin, and without allow-same-origin the page gets an opaque origin of its own, so its scripts can
# read neither the dashboard's cookies and CSRF tokens nor its API with the viewer's session (issue 34, H2). An
# app that needs its own origin needs a subdomain app; a deployment may instead let workspace owners open their own
# path apps unsandboxed, as Coder does (--dangerous-allow-path-app-same-origin, app/agents/apps.py).
SANDBOX = "sandbox allow-scripts allow-forms allow-popups allow-modals allow-downloads"


# What may stay as it is in a request line to the app: printable ASCII. Anything else the client sent raw (bytes
# over 0x7f) is percent-encoded, which http.client requires and which names the same resource.
_REQUEST_LINE_SAFE = "".join(chr(code) for code in range(0x21, 0x7F))
# A cookie's Path ends at ";" and some parsers split headers at ",".
_COOKIE_PATH_SAFE = _REQUEST_LINE_SAFE.replace(";", "").replace(",", "")
_ABSOLUTE_FORM = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^/?#]*")


@dataclass(frozen=True)
class AppRequestPath:
    """The request's path split at the app's prefix, as the client sent it (still percent-encoded): the app gets
    ``%3F`` as part of its path, never as the start of a query, and ``%2e%2e`` as written, never as ``..``."""

    prefix: str  # /@owner/workspace.agent/apps/slug/ as the client wrote it: where the app's cookies belong
    rest: str  # the app's own path after the prefix, without its leading slash
    query: str


def app_request_path(
    environ: Mapping[str, Any], owner: str, workspace_and_agent: str, slug: str, decoded_rest: str
) -> AppRequestPath:
    """Split the raw request target (gunicorn's ``RAW_URI``, Werkzeug's ``REQUEST_URI``) where the route split the
    decoded path."""
    route = [f"@{owner}", workspace_and_agent, "apps", slug]
    raw = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or "")
    absolute = _ABSOLUTE_FORM.match(raw)
    path, _, query = (raw[absolute.end() :] if absolute else raw).partition("?")
    segments = path.split("/")
    if len(segments) >= 6 and segments[0] == "" and [_decoded(part) for part in segments[1:5]] == route:
        prefix = "/".join(segments[:5]) + "/"
        return AppRequestPath(_quoted(prefix, _COOKIE_PATH_SAFE), _quoted("/".join(segments[5:])), _quoted(query))
    # Another WSGI server, or a request line that does not split where the route did (an encoded slash in the
    # prefix): encode again what was decoded, rather than hand the app a decoded "?".
    prefix = "/" + "/".join(quote(part, safe="@") for part in route) + "/"
    return AppRequestPath(prefix, quote(decoded_rest, safe="/"), _quoted(str(environ.get("QUERY_STRING") or "")))


def own_host_request_path(environ: Mapping[str, Any]) -> AppRequestPath:
    """The request target as the client sent it, for an app on a host of its own: all of the path is the app's."""
    raw = str(environ.get("RAW_URI") or environ.get("REQUEST_URI") or "")
    absolute = _ABSOLUTE_FORM.match(raw)
    path, _, query = (raw[absolute.end() :] if absolute else raw).partition("?")
    if not path.startswith("/"):  # another WSGI server: what it decoded, encoded again
        path, query = quote(str(environ.get("PATH_INFO") or "/"), safe="/"), str(environ.get("QUERY_STRING") or "")
    return AppRequestPath("/", _quoted(path[1:]), _quoted(query))


def _decoded(segment: str) -> str:
    """A raw segment as Werkzeug decodes it (WSGI strings carry the request's bytes as latin-1)."""
    return unquote_to_bytes(segment.encode("latin-1", "replace")).decode("utf-8", "replace")


def _quoted(raw: str, safe: str = _REQUEST_LINE_SAFE) -> str:
    return quote(raw, safe=safe, encoding="latin-1", errors="replace")


def upstream_headers(request: Request, target: AppTarget, *, websocket: bool) -> dict[str, str]:
    headers = {
        name: value
        for name, value in request.headers.items()
        if name.lower() not in HOP_BY_HOP and not is_credential_header(name)
    }
    cookies = [
        part.strip()
        for part in request.headers.get("Cookie", "").split(";")
        if part.strip() and not is_slipway_cookie(part.split("=", 1)[0])
    ]
    headers.pop("Cookie", None)
    if cookies:
        headers["Cookie"] = "; ".join(cookies)
    # The browser's Host, as Coder's proxy keeps it: an app compares its requests' Origin with their Host (Jupyter,
    # Vite, webpack's dev server) and builds its absolute links from it, both of which must name the dashboard's
    # address the browser used, not the app's own. The forwarding headers are the proxy's word alone.
    headers = {
        _CANONICAL_CASE.get(name.lower(), name): value
        for name, value in headers.items()
        if not is_forwarding_header(name)
    }
    headers["Host"] = request.host
    headers["X-Forwarded-Host"] = request.host
    headers["X-Forwarded-Proto"] = request.scheme
    headers["X-Forwarded-For"] = request.remote_addr or ""
    if websocket:
        headers["Connection"] = "Upgrade"
        headers["Upgrade"] = "websocket"
    return headers


def is_forwarding_header(name: str) -> bool:
    """Headers that tell an app where a request came from: a client may not write them (Coder drops them unless a
    trusted proxy sent them; behind one, Slipway's own view of the request already reflects them)."""
    lowered = name.lower()
    return lowered in FORWARDING_HEADERS or lowered.startswith("x-forwarded-")


def is_credential_header(name: str) -> bool:
    lowered = name.lower()
    return lowered in CREDENTIAL_HEADERS or lowered.startswith(SLIPWAY_HEADER_PREFIX)


def is_slipway_cookie(name: str) -> bool:
    return name.strip().lower() in SLIPWAY_COOKIES


def upstream_path(target: AppTarget, requested: AppRequestPath) -> str:
    path = f"{target.base_path}/{requested.rest}"
    return f"{path}?{requested.query}" if requested.query else path


def proxy_http(
    client: redis.Redis,
    signer: Signer,
    target: AppTarget,
    request: Request,
    requested: AppRequestPath,
    *,
    pool: ConnectionPool,
    key: PoolKey,
    sandbox: bool = True,
) -> Response:
    """Carry the request on one of ``key``'s idle connections, or a new one; the connection goes back to the pool
    once the app's answer has been passed on whole."""
    headers = upstream_headers(request, target, websocket=False)
    exchange = Exchange(request.method, upstream_path(target, requested), headers)
    if request.content_length and request.content_length <= REPLAYABLE_BODY_BYTES:
        exchange.body = request.get_data(cache=False)  # small: held, so that it can be sent again
        headers["Content-Length"] = str(len(exchange.body))
    elif request.content_length:  # streamed to the app as it arrives, never held whole in memory
        exchange.body, headers["Content-Length"] = request.stream, str(request.content_length)
        exchange.replayable = False
    elif request.headers.get("Transfer-Encoding", "").lower() == "chunked":
        exchange.body, exchange.chunked = iter(lambda: request.stream.read(CHUNK), b""), True
        exchange.replayable = False
    connection, upstream = _send(client, signer, target, pool, key, exchange)

    def body_chunks() -> Iterator[bytes]:
        whole = False
        try:
            while chunk := upstream.read1(CHUNK):
                yield chunk
            # read1 leaves a response whose length it has counted down to zero open, and http.client sends no
            # further request on a connection whose last response is open.
            upstream.close()
            whole = True
        except (OSError, http.client.HTTPException):
            return  # the app or the tunnel went away mid-body: end the response where it broke
        finally:
            # Only a connection whose answer was read to the end may carry another request.
            if whole:
                pool.give_back(connection)
            else:
                connection.close()

    answer = _response_headers(upstream.getheaders(), target, requested.prefix, sandbox=sandbox)
    # The app's own headers, not the dashboard's: its pages would break under the dashboard's policy.
    return ForeignResponse(stream_with_context(body_chunks()), status=upstream.status, headers=answer)


@dataclass
class Exchange:
    """One request as it goes to the app. ``replayable``: its body (if any) is held in memory, so that it may be
    sent again on a new connection when an idle one turns out to have been closed."""

    method: str
    path: str
    headers: dict[str, str]
    body: object = None
    chunked: bool = False
    replayable: bool = True

    def may_send_again(self) -> bool:
        """Sending it twice changes nothing the app keeps (RFC 9110 §9.2.2), and its body is held to send."""
        return self.replayable and self.method in IDEMPOTENT_METHODS


def _send(
    client: redis.Redis, signer: Signer, target: AppTarget, pool: ConnectionPool, key: PoolKey, exchange: Exchange
) -> tuple[AppConnection, http.client.HTTPResponse]:
    if exchange.replayable:
        idle = pool.take(key)
        if idle is not None:
            try:
                return idle, _exchange(idle, exchange)
            except (OSError, http.client.HTTPException):
                # The app closed the idle connection as the request went out (its keep-alive timeout): sent once
                # more on a new one, as browsers do with a request on a reused connection that gets no answer.
                idle.close()
    # A streamed body goes on a new connection: it cannot be sent twice, and a dial costs little next to it.
    connection = pool.open(client, signer, target, key)
    try:
        return connection, _exchange(connection, exchange)
    except (OSError, http.client.HTTPException) as exc:
        connection.close()
        if not (connection.ended_by_a_restart() and exchange.may_send_again()):
            raise AppUnavailable(f"the app did not answer ({exc or exc.__class__.__name__})") from exc
    return _send_after_a_restart(client, signer, target, pool, key, exchange)


def _send_after_a_restart(
    client: redis.Redis, signer: Signer, target: AppTarget, pool: ConnectionPool, key: PoolKey, exchange: Exchange
) -> tuple[AppConnection, http.client.HTTPResponse]:
    """The request's tunnel was ended by a replica that is restarting before the app answered: sent again on a new
    one, as nginx passes an idempotent request to the next server. The agent may itself be moving to another
    replica: a dial it misses between its connections goes unanswered, so each try waits briefly and the next one
    dials again, until the agent is back or :data:`RESTART_RETRY_SECONDS` have gone."""
    deadline = time.monotonic() + RESTART_RETRY_SECONDS
    while True:
        try:
            connection = pool.open(client, signer, target, key, dial_timeout=RESTART_DIAL_TIMEOUT_SECONDS)
        except AppUnavailable:
            if time.monotonic() >= deadline:
                raise
            time.sleep(RESTART_RETRY_PAUSE_SECONDS)
            continue
        try:
            return connection, _exchange(connection, exchange)
        except (OSError, http.client.HTTPException) as exc:
            connection.close()
            if not connection.ended_by_a_restart() or time.monotonic() >= deadline:
                raise AppUnavailable(f"the app did not answer ({exc or exc.__class__.__name__})") from exc


def _exchange(connection: AppConnection, exchange: Exchange) -> http.client.HTTPResponse:
    connection.uses += 1
    connection.http.request(
        exchange.method,
        exchange.path,
        body=exchange.body,  # type: ignore[arg-type]  # bytes, a stream or an iterable of bytes, all accepted
        headers=exchange.headers,
        encode_chunked=exchange.chunked,
    )
    return connection.http.getresponse()


def _response_headers(
    items: list[tuple[str, str]], target: AppTarget, prefix: str, *, sandbox: bool
) -> list[tuple[str, str]]:
    headers = []
    app_origins = {f"{target.scheme}://{target.host}:{target.port}", f"{target.scheme}://{target.host}"}
    for name, value in items:
        lowered = name.lower()
        if lowered in HOP_BY_HOP - {"content-length"} or lowered in ORIGIN_WIDE_HEADERS:
            continue
        if lowered == "location":
            value = _rewrite_location(value, app_origins, target.base_path, prefix)
        if lowered == "set-cookie":
            scoped = scoped_cookie(value, prefix)
            if scoped is None:
                continue
            value = scoped
        headers.append((name, value))
    if sandbox:
        headers.append(("Content-Security-Policy", SANDBOX))
    return headers


def scoped_cookie(set_cookie: str, app_prefix: str) -> str | None:
    """The app's cookie, confined to the app's own path on the dashboard's origin (``Path`` forced to the app's
    prefix, no ``Domain``); None for a cookie the app may not set: one of Slipway's, or one without a name, which
    browsers send as its bare value (``=slipway_session=x`` would come back as ``slipway_session=x``)."""
    pair, *attributes = set_cookie.split(";")
    name, equals, _ = pair.partition("=")
    if not equals or not name.strip() or is_slipway_cookie(name):
        return None
    kept = [
        attribute.strip()
        for attribute in attributes
        if attribute.strip() and attribute.split("=", 1)[0].strip().lower() not in ("path", "domain")
    ]
    return "; ".join([pair.strip(), *kept, f"Path={app_prefix}"])


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


def proxy_websocket(
    client: redis.Redis,
    signer: Signer,
    target: AppTarget,
    request: Request,
    requested: AppRequestPath,
    holder: Holder | None = None,
) -> Response:
    """Forward the upgrade; once the app answers 101, splice the browser's socket and the tunnel (a tunnel of its
    own: an upgraded connection never goes back to the pool)."""
    browser: socket.socket | None = request.environ.get("gunicorn.socket")
    if browser is None:
        raise AppUnavailable("WebSocket apps need the slipway server (gunicorn)")
    connection = TunnelConnection(client, signer, target.agent.id, target, holder)
    headers = upstream_headers(request, target, websocket=True)
    head = f"GET {upstream_path(target, requested)} HTTP/1.1\r\n"
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
