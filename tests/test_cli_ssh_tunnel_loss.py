"""`slipway ssh` ends, saying why, when its tunnel goes away under it (the server died or restarted) rather than
waiting for ever for an SSH server that can no longer answer."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import click
import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve

from cli.ssh import SessionRequest, _session
from cli.tunnel import InterruptibleReader
from tests.support.net import free_port


@asynccontextmanager
async def dying_server() -> AsyncIterator[str]:
    """Accepts a tunnel, then drops the connection without a word, as a killed server does."""

    async def handler(connection: ServerConnection) -> None:
        await asyncio.sleep(0.5)
        connection.transport.abort()

    port = free_port()
    async with serve(handler, "127.0.0.1", port):
        yield f"ws://127.0.0.1:{port}/"


class Endpoint:
    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self, **params: str | int) -> ClientConnection:
        return await connect(self.url)


def test_a_session_whose_tunnel_dies_ends_with_the_reason() -> None:
    async def scenario() -> None:
        read_end, write_end = os.pipe()
        stdin = InterruptibleReader(read_end)
        request = SessionRequest(host="slipway.ws", command="sleep 60", pty=False, username="me")
        try:
            async with dying_server() as url:
                with pytest.raises(click.ClickException, match="connection to the server was lost"):
                    await asyncio.wait_for(_session(Endpoint(url), request, stdin), timeout=30)  # type: ignore[arg-type]
        finally:
            stdin.close()
            os.close(write_end)

    asyncio.run(scenario())
