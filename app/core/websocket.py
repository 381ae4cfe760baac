"""WebSockets served by the web process: the view takes over the client's socket from gunicorn.

The handshake is answered from the WSGI environ (gunicorn has already parsed the request); frames are handled
by websockets' sans-I/O :class:`Protocol`, whose masking is C-accelerated. The socket is read only when the
handler asks for the next message, so a sender faster than its consumer is held back by TCP instead of being
buffered in memory. With gevent workers each connection is a greenlet; a reader and a writer may run at once.
"""

from __future__ import annotations

import base64
import hashlib
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

from flask import Response, request
from websockets.exceptions import InvalidState, ProtocolError
from websockets.frames import Frame, Opcode
from websockets.protocol import CLOSED, OPEN, Protocol, Side

from app.core.errors import InvalidInput
from app.core.limits import live_connection

HANDSHAKE_GUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
RECEIVE_BYTES = 256 * 1024
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
# Close codes of our own (4000-4999 are the application's): see agent/README.md.
CLOSE_NORMAL = 1000
CLOSE_GOING_AWAY = 1001


class WebSocketClosed(Exception):
    """The connection is closed; ``code`` and ``reason`` are what the peer (or we) sent."""

    def __init__(self, code: int | None, reason: str = "") -> None:
        super().__init__(f"websocket closed ({code}) {reason}".strip())
        self.code = code
        self.reason = reason


def is_websocket_request(environ: dict[str, Any]) -> bool:
    return str(environ.get("HTTP_UPGRADE", "")).lower() == "websocket"


class WebSocket:
    """One side of a connection, safe for one reader and any number of writers at once.

    Two locks: ``_state`` guards the protocol object (brief), ``_writing`` orders writes to the socket (held
    during ``sendall``, which blocks while the peer is not reading). The reader never waits for ``_writing``:
    what it queues (pongs, the close reply) is written by whoever holds it, before letting go. Otherwise a
    tunnel busy in both directions could stall with each side blocked in ``sendall``, neither reading.
    """

    def __init__(self, sock: socket.socket, *, max_message_bytes: int = MAX_MESSAGE_BYTES) -> None:
        self.sock = sock
        self.protocol = Protocol(Side.SERVER, state=OPEN, max_size=max_message_bytes)
        self._state = threading.Lock()
        self._writing = threading.Lock()
        self._pending: list[bytes] = []
        self._fragments: list[bytes] = []
        self._fragment_opcode: Opcode | None = None
        self._events: list[Frame] = []
        self.last_pong = 0.0

    @property
    def open(self) -> bool:
        return self.protocol.state is OPEN

    def receive(self, timeout: float | None = None) -> bytes | str | None:
        """The next whole message (bytes for binary, str for text), or None when ``timeout`` passed first.

        Raises :class:`WebSocketClosed` once the peer closed (or the connection broke)."""
        while True:
            message = self._next_message()
            if message is not None:
                return message
            if self.protocol.state is CLOSED or not self._read(timeout):
                if self.protocol.state is CLOSED:
                    raise WebSocketClosed(self.protocol.close_code, self.protocol.close_reason or "")
                return None

    def send(self, data: bytes | str) -> None:
        if isinstance(data, bytes):
            self._produce(lambda: self.protocol.send_binary(data))
        else:
            text = data.encode()
            self._produce(lambda: self.protocol.send_text(text))

    def ping(self, payload: bytes = b"") -> None:
        self._produce(lambda: self.protocol.send_ping(payload))

    def close(self, code: int = CLOSE_NORMAL, reason: str = "") -> None:
        """Send a close frame (reasons are cut to the 123 bytes a frame allows); never raises."""
        reason = reason.encode()[:123].decode(errors="ignore")
        try:
            self._produce(lambda: self.protocol.send_close(code, reason) if self.protocol.state is OPEN else None)
        except WebSocketClosed:
            pass

    def _produce(self, make_frame: Callable[[], None]) -> None:
        with self._writing:
            with self._state:
                try:
                    make_frame()
                except InvalidState as exc:
                    raise WebSocketClosed(self.protocol.close_code, "closed") from exc
            self._write_pending()
        self._drain()

    def _take_pending(self) -> list[bytes]:
        with self._state:
            self._pending.extend(self.protocol.data_to_send())
            chunks, self._pending = self._pending, []
        return chunks

    def _write_pending(self) -> None:
        """Write everything queued, including what the reader queues meanwhile. The caller holds ``_writing``."""
        while chunks := self._take_pending():
            for chunk in chunks:
                try:
                    if chunk:
                        self.sock.sendall(chunk)
                    else:  # the protocol asks for the TCP connection to end
                        self.sock.shutdown(socket.SHUT_WR)
                except OSError as exc:
                    self.protocol.state = CLOSED
                    raise WebSocketClosed(self.protocol.close_code, "connection lost") from exc

    def _drain(self) -> None:
        """Write what is queued unless a writer is busy: it writes the queue itself before it lets go."""
        while True:
            with self._state:
                self._pending.extend(self.protocol.data_to_send())
                if not self._pending:
                    return
            if not self._writing.acquire(blocking=False):
                return
            try:
                self._write_pending()
            except WebSocketClosed:
                return
            finally:
                self._writing.release()

    def _next_message(self) -> bytes | str | None:
        while self._events:
            frame = self._events.pop(0)
            if frame.opcode is Opcode.PONG:
                self.last_pong = time.monotonic()
                continue
            if frame.opcode in (Opcode.TEXT, Opcode.BINARY):
                self._fragment_opcode = frame.opcode
                self._fragments = []
            elif frame.opcode is not Opcode.CONT:
                continue  # ping (answered by the protocol) or close
            self._fragments.append(bytes(frame.data))
            if frame.fin:
                data = b"".join(self._fragments)
                self._fragments = []
                return data.decode() if self._fragment_opcode is Opcode.TEXT else data
        return None

    def _read(self, timeout: float | None) -> bool:
        """Feed the protocol what the socket has; False when nothing arrived within ``timeout``."""
        if timeout is not None:
            readable, _, _ = select.select([self.sock], [], [], timeout)
            if not readable:
                return False
        try:
            data = self.sock.recv(RECEIVE_BYTES)
        except OSError:
            data = b""
        with self._state:
            try:
                if data:
                    self.protocol.receive_data(data)
                else:
                    self.protocol.receive_eof()
            except ProtocolError:
                pass  # the protocol has failed the connection; its close frame goes out below
            self._events.extend(self.protocol.events_received())  # type: ignore[arg-type]  # frames, in this use
        self._drain()  # pongs and close replies the protocol queued
        if not data:
            self.protocol.state = CLOSED
        return True


class TakenOverResponse(Response):
    """What a view returns once it has served a WebSocket on the raw socket: gunicorn must write nothing more.

    gunicorn ends a connection without writing when the WSGI application raises StopIteration."""

    def __call__(self, environ: Any, start_response: Any) -> Any:
        raise StopIteration


def accept_websocket(environ: dict[str, Any]) -> WebSocket:
    """Answer the handshake on the request's socket. Call after every check that may refuse the request."""
    key = environ.get("HTTP_SEC_WEBSOCKET_KEY", "")
    if not is_websocket_request(environ) or not key:
        raise InvalidInput("This address takes WebSocket connections only.")
    if environ.get("HTTP_SEC_WEBSOCKET_VERSION", "13") != "13":
        raise InvalidInput("Only WebSocket version 13 is supported.")
    sock: socket.socket | None = environ.get("gunicorn.socket")
    if sock is None:
        raise InvalidInput("WebSockets need the slipway server (gunicorn); this server cannot take over sockets.")
    digest = hashlib.sha1((key + HANDSHAKE_GUID).encode(), usedforsecurity=False).digest()
    accept = base64.b64encode(digest).decode()
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.sendall(
        (
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            f"Sec-WebSocket-Accept: {accept}\r\n\r\n"
        ).encode()
    )
    return WebSocket(sock)


def serve_websocket(handler: Callable[[WebSocket], None], *, lifeline: bool = False) -> Response:
    """Take the request's connection over as a WebSocket and run ``handler`` on it until it returns.

    It holds a live connection slot (app/limits.py) throughout: beyond its holder's cap it is refused with 429
    before the upgrade. ``lifeline`` marks an agent's control connection (see ``AGENT_LIFELINE_RESERVE``)."""
    with live_connection(lifeline=lifeline):
        websocket = accept_websocket(request.environ)
        try:
            handler(websocket)
        finally:
            websocket.close(CLOSE_GOING_AWAY)
    return TakenOverResponse()
