"""Half-sent requests ("slowloris") cannot stop a real server: request heads have a deadline, and one address
may hold only so many connections in each web worker.

The server has few connection slots (2 workers x 100) and a short header timeout. Attackers connect from other
loopback addresses (127.0.0.2 and up; the server listens on 127.0.0.1) than the health checks, which come from
127.0.0.1: a trusted proxy's address, which the per-address limit leaves alone.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import httpx
import pytest

from tests.support.net import read_all_at_once
from tests.support.server import ServerProcess

HEADER_TIMEOUT_SECONDS = 2
PER_CLIENT = 20
WORKERS = 2
ATTACK = 300
PARTIAL_REQUESTS = (
    b"GET /hea",  # half a request line
    b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n",  # the line, and the headers never end
    b"POST /api/v2/users/login HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nX-Slow: a",
)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    flags = [
        "--provisioner-daemons", "0",
        "--web-workers", str(WORKERS),
        "--web-worker-connections", "100",
        "--request-header-timeout", f"{HEADER_TIMEOUT_SECONDS}s",
        "--max-connections-per-client", str(PER_CLIENT),
    ]  # fmt: skip
    with ServerProcess(tmp_path_factory.mktemp("slowloris") / "data", *flags, start_timeout=120) as running:
        yield running


def connect_from(source: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((source, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def answers_until_closed(sockets: list[socket.socket], timeout: float) -> dict[socket.socket, bytes]:
    """What the server sent on each socket, once it has closed them all (or ``timeout`` passed)."""
    reads = read_all_at_once(sockets, lambda _data, closed: closed, timeout)
    still_open = len(sockets) - len(reads.closed)
    assert not still_open, f"{still_open} connections were still open after {timeout:.0f} s"
    return reads.received


def read_response(sock: socket.socket) -> bytes:
    """One whole response (head, then as many bytes as its Content-Length says) from a kept-alive connection."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"the connection closed mid-response: {data!r}"
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = next(
        int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def healthz(server: ServerProcess) -> str:
    return httpx.get(f"{server.url}/healthz", timeout=10).text


def test_half_sent_requests_leave_the_server_answering_and_are_closed_after_the_header_timeout(
    server: ServerProcess,
) -> None:
    attackers = []
    try:
        for number in range(ATTACK):
            sock = connect_from("127.0.0.2", server.port)
            attackers.append(sock)
            try:
                sock.sendall(PARTIAL_REQUESTS[number % len(PARTIAL_REQUESTS)])
            except ConnectionResetError:
                pass  # refused already: its answer is read below
        for _ in range(3):  # more attacking sockets than the server has slots, and it still answers
            assert healthz(server) == "OK\n"

        answers = answers_until_closed(attackers, timeout=15 * HEADER_TIMEOUT_SECONDS)
        timed_out = [answer for answer in answers.values() if answer.startswith(b"HTTP/1.1 408 Request Timeout")]
        refused = [answer for answer in answers.values() if answer.startswith(b"HTTP/1.1 429 Too Many Requests")]
        # Each worker held at most its per-client share until the header timeout; the rest were refused at once.
        assert 1 <= len(timed_out) <= WORKERS * PER_CLIENT
        assert len(timed_out) + len(refused) == ATTACK
        assert b'{"message": "Too many connections from your address; close some and try again."}' in refused[0]
        assert b"Connection: close" in timed_out[0]
        assert healthz(server) == "OK\n"
    finally:
        for sock in attackers:
            sock.close()


def test_a_kept_alive_connection_may_idle_but_its_next_request_head_has_the_same_deadline(
    server: ServerProcess,
) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    with connect_from("127.0.0.3", server.port) as sock:
        sock.settimeout(10)
        sock.sendall(request)
        assert read_response(sock).startswith(b"HTTP/1.1 200 OK")
        # Idle between requests for longer than the header timeout (keep-alive, not a slow head): still served.
        time.sleep(HEADER_TIMEOUT_SECONDS + 1)
        sock.sendall(request)
        assert read_response(sock).endswith(b"\r\n\r\nOK\n")
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the next head stalls
        answer = answers_until_closed([sock], timeout=15 * HEADER_TIMEOUT_SECONDS)[sock]
    assert answer.startswith(b"HTTP/1.1 408 Request Timeout")


def test_one_address_may_hold_only_its_share_of_connections_but_a_local_proxy_is_not_limited(
    server: ServerProcess,
) -> None:
    request = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    for source, many in (("127.0.0.4", 3 * PER_CLIENT * WORKERS), ("127.0.0.1", 3 * PER_CLIENT * WORKERS)):
        sockets = [connect_from(source, server.port) for _ in range(many)]
        try:
            answers = []
            for sock in sockets:  # each stays open after its answer (keep-alive), so they all count at once
                sock.settimeout(10)
                try:
                    sock.sendall(request)
                    answers.append(read_response(sock))
                except ConnectionResetError:
                    answers.append(b"reset")
            served = sum(answer.startswith(b"HTTP/1.1 200 OK") for answer in answers)
            if source == "127.0.0.1":
                assert served == many  # the proxy in front carries everyone's connections
            else:
                assert served <= WORKERS * PER_CLIENT
                assert sum(answer.startswith(b"HTTP/1.1 429") for answer in answers) >= many - WORKERS * PER_CLIENT
        finally:
            for sock in sockets:
                sock.close()
