"""A WebSocket server that accepts one tunnel and then ends it a given way (a killed server, a draining replica),
and the endpoint `slipway ssh`'s tunnel code dials it through: for testing what the CLI says when a tunnel ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve

from protocol.agentapi import CLOSE_SERVER_RESTARTING, SERVER_RESTARTING_REASON
from tests.support.net import free_port


async def drop_without_a_word(connection: ServerConnection) -> None:
    """As a killed server does."""
    connection.transport.abort()


async def close_as_draining(connection: ServerConnection) -> None:
    """As a draining replica does (a rolling restart): 4503 "server restarting"."""
    await connection.close(CLOSE_SERVER_RESTARTING, SERVER_RESTARTING_REASON)


@asynccontextmanager
async def ending_server(end: Callable[[ServerConnection], Awaitable[None]]) -> AsyncIterator[str]:
    """Accepts a tunnel, waits half a second, then calls ``end`` on it; yields the server's URL."""

    async def handler(connection: ServerConnection) -> None:
        await asyncio.sleep(0.5)
        await end(connection)

    port = free_port()
    async with serve(handler, "127.0.0.1", port):
        yield f"ws://127.0.0.1:{port}/"


class Endpoint:
    """Stands in for the CLI's tunnel endpoint: every open dials ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url

    async def open(self, **params: str | int) -> ClientConnection:
        return await connect(self.url)
