"""The tunnel pumps, with a WebSocket peer standing for the user's side of a tunnel (no Slipway server: the
end-to-end tests against the real server cover the relay through it)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect
from websockets.asyncio.server import ServerConnection, serve

from agent.terminal import PtyProcess
from agent.tunnels import describe_connect_error, relay_stream, relay_terminal
from tests.agent.support import run

UserSide = Callable[[ServerConnection], Awaitable[None]]


@asynccontextmanager
async def tunnel_pair(user_side: UserSide) -> AsyncIterator[ClientConnection]:
    """The agent's WebSocket connected to ``user_side``, which plays the user's half of the tunnel."""
    async with serve(user_side, "127.0.0.1", 0) as server:
        port = server.sockets[0].getsockname()[1]
        async with connect(f"ws://127.0.0.1:{port}", compression=None) as websocket:
            yield websocket


async def frames_until_close(websocket: ServerConnection) -> list[str | bytes]:
    return [message async for message in websocket]


def test_tcp_stream_with_half_close_in_both_directions() -> None:
    received: list[str | bytes] = []

    async def count_until_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data = await reader.read()  # everything up to the user's half-close
        writer.write(f"got {len(data)} bytes".encode())
        await writer.drain()
        writer.close()

    async def user(websocket: ServerConnection) -> None:
        for _ in range(10):
            await websocket.send(b"x" * 100_000)
        await websocket.send(json.dumps({"type": "eof"}))
        received.extend(await frames_until_close(websocket))

    async def scenario() -> None:
        service = await asyncio.start_server(count_until_eof, "127.0.0.1", 0)
        port = service.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            async with tunnel_pair(user) as websocket:
                await relay_stream(websocket, reader, writer)
            writer.close()
        finally:
            service.close()
            await service.wait_closed()

    run(scenario())
    assert b"".join(frame for frame in received if isinstance(frame, bytes)) == b"got 1000000 bytes"
    assert json.loads(received[-1])["type"] == "eof"


def test_user_closing_the_tunnel_closes_the_connection() -> None:
    async def user(websocket: ServerConnection) -> None:
        await websocket.send(b"hello")
        await websocket.close()

    async def scenario() -> bytes:
        lines: list[bytes] = []
        closed = asyncio.Event()

        async def record(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            lines.append(await reader.read())  # returns once the agent side closed the socket
            writer.close()
            closed.set()

        service = await asyncio.start_server(record, "127.0.0.1", 0)
        port = service.sockets[0].getsockname()[1]
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            async with tunnel_pair(user) as websocket:
                await relay_stream(websocket, reader, writer)
            writer.close()
            await asyncio.wait_for(closed.wait(), 5)
        finally:
            service.close()
            await service.wait_closed()
        return lines[0]

    assert run(scenario()) == b"hello"


def test_terminal_tunnel_resizes_takes_input_and_reports_the_exit(tmp_path: Path) -> None:
    received: list[str | bytes] = []

    async def user(websocket: ServerConnection) -> None:
        await websocket.send(json.dumps({"type": "resize", "rows": 40, "cols": 100}))
        await websocket.send(b"stty size; exit 3\n")
        received.extend(await frames_until_close(websocket))

    async def scenario() -> None:
        pty = await PtyProcess.spawn(["/bin/sh"], cwd=tmp_path, env=dict(os.environ), rows=24, cols=80)
        async with tunnel_pair(user) as websocket:
            await relay_terminal(websocket, pty)

    run(scenario())
    output = b"".join(frame for frame in received if isinstance(frame, bytes)).decode()
    assert "40 100" in output
    assert json.loads(received[-1])["type"] == "exit" and json.loads(received[-1])["code"] == 3


def test_user_leaving_a_terminal_hangs_it_up(tmp_path: Path) -> None:
    async def user(websocket: ServerConnection) -> None:
        await websocket.recv()  # the prompt: the shell is up
        await websocket.close()

    async def scenario() -> int | None:
        pty = await PtyProcess.spawn(["/bin/sh", "-i"], cwd=tmp_path, env=dict(os.environ), rows=24, cols=80)
        async with tunnel_pair(user) as websocket:
            await relay_terminal(websocket, pty)
        return pty.returncode

    assert run(scenario()) is not None


def test_dial_errors_say_what_went_wrong() -> None:
    assert (
        describe_connect_error("127.0.0.1", 8080, ConnectionRefusedError(111, "refused"))
        == "connection refused: nothing listens on 127.0.0.1:8080"
    )
    assert describe_connect_error("10.0.0.1", 22, TimeoutError()) == "timed out connecting to 10.0.0.1:22"
