from __future__ import annotations

import itertools
import os
import random
import selectors
import socket
import time
from collections.abc import Callable
from dataclasses import dataclass

import httpx

# Ports for the servers tests start come from below the kernel's ephemeral range (32768-60999 on Linux), where no
# outgoing connection or bind to port 0 ever lands, split into one slice per parallel worker (pytest-xdist's gw0,
# gw1...): a port handed out here and bound a moment later by a server cannot be taken meanwhile by another
# worker's server or by any client socket. Each slice is walked from a random start so that two runs at once on one
# machine rarely meet; ServerProcess retries on the bind failure that is left.
_PORTS_FIRST, _PORTS_END, _SLICES = 10000, 32768, 16


def _worker_slice() -> range:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    index = int(worker) % _SLICES if worker.isdigit() else 0
    size = (_PORTS_END - _PORTS_FIRST) // _SLICES
    start = _PORTS_FIRST + index * size
    return range(start, start + size)


_ports = _worker_slice()
_next_port = itertools.count(random.randrange(len(_ports)))


def free_port() -> int:
    """A port on 127.0.0.1 that is free now and that no other worker of this run will hand out."""
    for _ in range(len(_ports)):
        port = _ports[next(_next_port) % len(_ports)]
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise AssertionError(f"no free port in {_ports}")


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
