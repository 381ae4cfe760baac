"""The client's error mapping and its retry with back-off, which logs each distinct problem once."""

from __future__ import annotations

import logging

import pytest

from agent.api import AgentAPI, AgentAPIError, Backoff, ProblemLog, ServerUnavailable, _raise_for, retry
from tests.agent.support import run


def test_401_and_server_errors_are_worth_retrying_other_refusals_are_not() -> None:
    with pytest.raises(ServerUnavailable, match="401 Agent token invalid"):
        _raise_for(401, b'{"message": "Agent token invalid"}')
    with pytest.raises(ServerUnavailable, match="502"):
        _raise_for(502, b"<html>bad gateway</html>")
    with pytest.raises(AgentAPIError) as refused:
        _raise_for(400, b'{"message": "Bad state", "detail": "unknown lifecycle state"}')
    assert refused.value.status == 400
    assert refused.value.message == "Bad state (unknown lifecycle state)"
    _raise_for(204, b"")


def test_back_off_doubles_to_its_cap_with_jitter() -> None:
    backoff = Backoff(initial=0.5, maximum=10)
    delays = [backoff.next_delay() for _ in range(8)]
    assert 0.375 <= delays[0] <= 0.625
    assert 0.75 <= delays[1] <= 1.25
    assert all(7.5 <= delay <= 12.5 for delay in delays[5:])
    backoff.reset()
    assert backoff.next_delay() <= 0.625


def test_retry_logs_each_distinct_problem_once(caplog: pytest.LogCaptureFixture) -> None:
    problems = ["401 no agent"] * 5 + ["cannot reach the server"] * 3
    attempts: list[int] = []

    async def flaky() -> str:
        attempts.append(1)
        if problems:
            raise ServerUnavailable(problems.pop(0))
        return "manifest"

    caplog.set_level(logging.INFO, logger="agent.api")
    result = run(retry(flaky, ProblemLog(), backoff=Backoff(initial=0.001, maximum=0.002)))
    assert result == "manifest"
    assert len(attempts) == 9
    assert [record.getMessage() for record in caplog.records] == [
        "waiting for the server: 401 no agent",
        "waiting for the server: cannot reach the server",
        "the server answers again",
    ]


def test_retry_gives_up_at_its_deadline() -> None:
    async def never() -> None:
        raise ServerUnavailable("401 no agent")

    async def scenario() -> None:
        loop_time = __import__("time").monotonic
        await retry(never, ProblemLog(), backoff=Backoff(initial=0.05, maximum=0.05), deadline=loop_time() + 0.3)

    with pytest.raises(ServerUnavailable):
        run(scenario())


def test_websocket_urls_follow_the_access_url() -> None:
    assert AgentAPI("http://127.0.0.1:3000", "t")._websocket_url("/rpc") == (
        "ws://127.0.0.1:3000/api/v2/workspaceagents/me/rpc"
    )
    assert AgentAPI("https://slipway.example/", "t")._websocket_url("/tunnels/x") == (
        "wss://slipway.example/api/v2/workspaceagents/me/tunnels/x"
    )
