"""`slipway ssh` ends, saying why, when its tunnel goes away under it (the server died or restarted) rather than
waiting for ever for an SSH server that can no longer answer."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Awaitable, Callable

import click
import pytest
from websockets.asyncio.server import ServerConnection

from cli.ssh import SessionRequest, _session
from cli.tunnel import InterruptibleReader
from tests.support.tunnel_servers import Endpoint, close_as_draining, drop_without_a_word, ending_server


@pytest.mark.parametrize(
    ("end", "said"),
    [(drop_without_a_word, "connection to the server was lost"), (close_as_draining, "restarting; connect again now")],
    ids=["server-died", "server-restarting"],
)
def test_a_session_whose_tunnel_ends_says_why(end: Callable[[ServerConnection], Awaitable[None]], said: str) -> None:
    async def scenario() -> None:
        read_end, write_end = os.pipe()
        stdin = InterruptibleReader(read_end)
        request = SessionRequest(host="slipway.ws", command="sleep 60", pty=False, username="me")
        try:
            async with ending_server(end) as url:
                with pytest.raises(click.ClickException, match=said):
                    await asyncio.wait_for(_session(Endpoint(url), request, stdin), timeout=30)  # type: ignore[arg-type]
        finally:
            stdin.close()
            os.close(write_end)

    asyncio.run(scenario())
