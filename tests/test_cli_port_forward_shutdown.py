"""Ctrl-C ends `slipway port-forward` quietly, whatever its connections are doing at that moment.

asyncio.run answers Ctrl-C by cancelling every task, so a connection's handler can be cancelled at any of its
awaits: opening the tunnel, pumping, or waiting for its socket to close. On Python 3.11 a stream server's handler
that ends cancelled is printed as "Exception in callback ... CancelledError" with a traceback, which is what a
user (and a CI run) saw when Ctrl-C came just as a connection was closing."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from cli.port_forward import PortForward, forward_connection
from cli.tunnel import AgentTarget, TunnelEndpoint
from tests.support.net import free_port

# Enough loop turns to pass through every await of a connection whose tunnel is refused, closing included.
LOOP_TURNS_TO_TRY = 40


async def cancel_a_connection_after(turns: int, endpoint: TunnelEndpoint) -> tuple[bool, list[dict[str, Any]]]:
    """Accept one connection, let its handler run `turns` loop turns, cancel it as asyncio.run would; report
    whether the handler ended cancelled and what reached the loop's exception handler."""
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    handlers: list[asyncio.Task[None]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        handlers.append(asyncio.current_task())  # type: ignore[arg-type]
        await forward_connection(reader, writer, forward=PortForward("127.0.0.1", 0, 9), endpoint=endpoint)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    _, client = await asyncio.open_connection("127.0.0.1", port)
    while not handlers:
        await asyncio.sleep(0)
    for _ in range(turns):
        await asyncio.sleep(0)
    handler = handlers[0]
    handler.cancel()
    await asyncio.gather(handler, return_exceptions=True)
    await asyncio.sleep(0)  # the stream server's done-callback runs here
    client.close()
    server.close()
    await server.wait_closed()
    return handler.cancelled(), reported


@pytest.fixture
def refused_endpoint() -> TunnelEndpoint:
    """A server address where nothing listens: the tunnel is refused at once, and the handler goes on to close."""
    return TunnelEndpoint(f"http://127.0.0.1:{free_port()}", "token", AgentTarget("ws", "main", "agent-id"))


def test_ctrl_c_at_any_moment_of_a_connection_ends_it_quietly(
    refused_endpoint: TunnelEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    ended_cancelled = []
    for turns in range(LOOP_TURNS_TO_TRY):
        cancelled, reported = asyncio.run(cancel_a_connection_after(turns, refused_endpoint))
        assert reported == [], f"after {turns} turns the loop reported {reported}"
        if cancelled:
            ended_cancelled.append(turns)
    assert ended_cancelled == [], f"handlers cancelled after {ended_cancelled} turns ended cancelled"
    assert "Traceback" not in capsys.readouterr().err


def test_the_probe_reaches_the_closing_of_the_connection(
    refused_endpoint: TunnelEndpoint, capsys: pytest.CaptureFixture[str]
) -> None:
    """The turns tried above must run past the refused tunnel into the socket's close, or the first test would
    prove nothing about the moment CI hit."""
    asyncio.run(cancel_a_connection_after(LOOP_TURNS_TO_TRY, refused_endpoint))
    assert f"to ws:9 failed: cannot open a tunnel through {refused_endpoint.server_url}" in capsys.readouterr().err
