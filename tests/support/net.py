from __future__ import annotations

import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_for_http(url: str, timeout: float = 20.0) -> httpx.Response:
    deadline = time.monotonic() + timeout
    last_error: Exception | None = None
    while time.monotonic() < deadline:
        try:
            response = httpx.get(url, timeout=2)
            if response.status_code == 200:
                return response
        except httpx.HTTPError as exc:
            last_error = exc
        time.sleep(0.05)
    raise TimeoutError(f"{url} did not answer 200 within {timeout} s (last error: {last_error})")


@dataclass
class Reads:
    received: dict[socket.socket, bytes]
    closed: set[socket.socket]  # by the server


def read_all_at_once(sockets: list[socket.socket], settled: Callable[[bytes, bool], bool], timeout: float) -> Reads:
    """Reads every socket side by side until ``settled(bytes so far, closed by the server)`` holds for each of
    them, or ``timeout`` passed. The sockets are left non-blocking."""
    reads = Reads({sock: b"" for sock in sockets}, set())
    selector = selectors.DefaultSelector()
    for sock in sockets:
        sock.setblocking(False)
        selector.register(sock, selectors.EVENT_READ)

    def all_settled() -> bool:
        return all(settled(reads.received[sock], sock in reads.closed) for sock in sockets)

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not all_settled():
        for key, _ in selector.select(timeout=0.5):
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            try:
                data = sock.recv(65536)
            except ConnectionResetError:
                data = b""
            reads.received[sock] += data
            if not data:
                reads.closed.add(sock)
                selector.unregister(sock)
    selector.close()
    return reads
