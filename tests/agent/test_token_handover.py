"""An agent whose token the server refuses (401: its workspace was claimed or rebuilt): it takes a new token the
server hands over, and its shutdown neither waits out every flush's timeout nor retries what no retry changes."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

import agent.main
from agent.api import AgentAPI, ServerUnavailable
from agent.config import AgentConfig
from agent.logs import log_line
from agent.main import Agent, _new_token
from protocol.agentapi import TOKEN_HEADER, Dial, Manifest, NewToken
from tests.agent.support import run

GOOD_TOKEN = "the-new-token"


class _Server(ThreadingHTTPServer):
    requests: list[tuple[str, str]]


class _OnlyTheNewToken(BaseHTTPRequestHandler):
    """The agent API as the server answers it: 401 to any token but the one it knows."""

    server: _Server

    def _answer(self) -> None:
        self.server.requests.append((self.path, self.headers.get(TOKEN_HEADER, "")))
        if self.headers.get(TOKEN_HEADER) != GOOD_TOKEN:
            body, status = json.dumps({"message": "No agent of a current workspace build has this token."}), 401
        elif self.path.endswith("/manifest"):
            body, status = Manifest(agent_id="a2").dumps(), 200
        else:
            body, status = "{}", 200
        data = body.encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self._answer()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[_Server]:
    httpd = _Server(("127.0.0.1", 0), _OnlyTheNewToken)
    httpd.requests = []
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


def _url(server: _Server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}"


def test_a_refused_client_remembers_it_until_it_is_handed_a_token_that_works(server: _Server) -> None:
    async def scenario() -> None:
        api = AgentAPI(_url(server), "the-old-token")
        try:
            with pytest.raises(ServerUnavailable, match="401"):
                await api.get_manifest()
            assert api.refused.is_set()
            api.use_token(GOOD_TOKEN)
            assert not api.refused.is_set()
            assert (await api.get_manifest()).agent_id == "a2"
        finally:
            await api.aclose()

    run(scenario())
    assert [token for _, token in server.requests] == ["the-old-token", GOOD_TOKEN]


def test_only_a_new_token_message_is_taken_for_one() -> None:
    assert _new_token(NewToken(token="t").dumps()) == NewToken(token="t")
    assert _new_token(Dial(tunnel_id="x", service="tcp", port=22).dumps()) is None
    assert _new_token('{"type": "token"}') is None  # no token in it


def test_shutdown_stops_sending_at_once_when_the_server_refuses_the_token(
    server: _Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Were the flushes to wait for their deadline, this test would outlast run()'s own timeout.
    monkeypatch.setattr(agent.main, "FLUSH_TIMEOUT", 3600.0)

    async def scenario() -> None:
        refused_agent = Agent(AgentConfig(_url(server), "the-old-token", tmp_path))
        senders = [
            asyncio.create_task(refused_agent._logs.run()),
            asyncio.create_task(refused_agent._lifecycle.run()),
        ]
        refused_agent._manifest = Manifest(agent_id="a1")  # started: shutdown reports its last state too
        refused_agent._logs.add(log_line("the stop script's output", "info", ""))
        control = asyncio.create_task(asyncio.sleep(3600))
        await refused_agent._shut_down(control)
        for task in senders:
            task.cancel()
        await asyncio.gather(*senders, return_exceptions=True)
        await refused_agent._api.aclose()

    run(scenario(), timeout=60)
    # The agent learnt of the refusal from the server's answer to the token it had. Which sender asked first is a
    # race (the log batch may never go); the log batch is not retried once refused.
    assert server.requests and all(token == "the-old-token" for _, token in server.requests)
    assert sum(path.endswith("/logs") for path, _ in server.requests) <= 1


def test_shutdowns_flushes_share_one_deadline(tmp_path: Path) -> None:
    given: list[float] = []

    async def wait_it_out(timeout: float) -> bool:
        given.append(timeout)
        await asyncio.sleep(timeout)
        return False

    async def scenario() -> None:
        stopping = Agent(AgentConfig("http://127.0.0.1:9", "token", tmp_path))
        deadline = time.monotonic() + 0.2
        for _ in range(3):
            assert not await stopping._flush_until(wait_it_out, deadline)
        await stopping._api.aclose()

    run(scenario())
    assert 0 < given[0] <= 0.2
    assert given[1:] == [0.0, 0.0]  # what the first flush used is gone for the others
